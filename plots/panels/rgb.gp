# plots/panels/rgb.gp — an image: columns x, y, r, g, b (0..255)
load panels . 'common.gp'
set size ratio -1
set xrange [-0.5:nx - 0.5]
set yrange [ny - 0.5:-0.5]
unset grid
plot in index idx using 1:2:3:4:5 with rgbimage notitle
