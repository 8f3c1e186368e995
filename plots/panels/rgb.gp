# plots/panels/rgb.gp — an image: columns x, y, r, g, b (0..255); circ_idx >= 0: a second block
# of circle centres (x, y in pixels) drawn on it, with circ_title in the key
load panels . 'common.gp'
set size ratio -1
set xrange [-0.5:nx - 0.5]
set yrange [ny - 0.5:-0.5]
unset grid
if (circ_idx >= 0) {
  set key below
  plot in index idx using 1:2:3:4:5 with rgbimage notitle, \
       in index circ_idx using 1:2 with points pt 6 ps 2.5 lw 2.5 lc rgb "#00cc00" title circ_title
} else {
  plot in index idx using 1:2:3:4:5 with rgbimage notitle
}
