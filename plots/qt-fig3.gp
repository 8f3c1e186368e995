# plots/qt-fig3.gp — QT Fig. 3 / Fig. 9: ViT outliers in background patches.
# (a) an example image with its outlier patches, (b) 6σ outlier count per patch position,
# (c) cumulative attention per patch of the next layer's top head, (d) value magnitudes of
# outlier vs other patches, (e) inf norm per layer (Fig. 9a), (f) background / border shares.
# usage: gnuplot -c plots/qt-fig3.gp in.dat out.png|out.pdf
# in.dat (written by experiments/qt-fig3.lua):
#   index 0: "x" "y" "r" "g" "b"                 example image pixels (0..255)
#   index 1: "x" "y" "outlier elements" "object" centres of the example's outlier patches (pixels)
#   index 2: matrix G×G  outlier elements per patch (row = patch row), summed over images
#   index 3: matrix G×G  cumulative attention of the top head per patch key, mean over images
#   index 4: "patches" "layer l head h" "all heads"   mean ‖v‖ of outlier / other patches
#   index 5: "layer" "layer output h" "FFN output"    inf norm per layer
#   index 6: "set" "share of patches" "share of 6σ outlier elements" "share of the top q % patches by max |x|"
#   index 7: "outlier layer" "attention layer" "top head" "images"
if (ARGC < 2) { print "usage: gnuplot -c qt-fig3.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 13in,8in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1600,1000
}
set output out
stats in index 7 using 1 nooutput
lo = int(STATS_min)
stats in index 7 using 2 nooutput
la = int(STATS_min)
stats in index 7 using 3 nooutput
hd = int(STATS_min)
stats in index 7 using 4 nooutput
nimg = int(STATS_min)
stats in index 0 using 1 nooutput
W = int(STATS_max) + 1

set multiplot layout 2,3 title sprintf("ViT outliers in background patches (QT Fig. 3 / Fig. 9, reproduced; %d held-out images)", nimg)

# (a) example image, outlier patches circled
set title sprintf("(a) example image; circles: patches with 6σ outliers at layer %d", lo)
set size ratio -1
set xrange [-0.5:W-0.5]; set yrange [W-0.5:-0.5]
unset xtics; unset ytics; unset colorbox
set key bottom right opaque
plot in index 0 using 1:2:3:4:5 with rgbimage notitle, \
     in index 1 using 1:2 with points pt 6 ps 3 lw 3 lc rgb "#00ff00" title "outlier patch"
set xtics; set ytics; set colorbox
unset key

# (b) outlier counts per patch position
set title sprintf("(b) 6σ outlier elements per patch, layer %d output (sum)", lo)
set autoscale fix
set xrange [*:*]; set yrange [*:*] reverse
set xlabel "patch column"; set ylabel "patch row"
set xtics 1; set ytics 1
set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
plot in index 2 matrix with image notitle

# (c) cumulative attention per patch
set title sprintf("(c) cumulative attention per patch, layer %d head %d (mean)", la, hd)
set palette defined (0 "white", 1 "#729fcf", 2 "#204a87", 3 "#000000")
plot in index 3 matrix with image notitle
unset xlabel; unset ylabel
set size noratio

# (d) value magnitudes
set title sprintf("(d) mean value norm ‖v‖, layer %d", la)
set autoscale
set yrange [0:*] noreverse
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.7 border -1
set boxwidth 0.9
set key below autotitle columnhead
set ylabel "mean ‖v_j‖"
set xtics nomirror
set ytics autofreq
plot in index 4 using 2:xtic(1) lc rgb "#cc0000", '' index 4 using 3 lc rgb "#3465a4"

# (e) inf norm per layer
set title "(e) inf norm per layer (Fig. 9a)"
set style data linespoints
set xlabel "layer (0-based)"; set ylabel "mean per-image max |x|"
set xtics 1
stats in index 5 using 1 nooutput
set xrange [-0.3:STATS_max + 0.3]
set yrange [0:*]
set key inside top left
plot in index 5 using 1:2 with linespoints pt 7 lw 2 lc rgb "#a40000", \
     in index 5 using 1:3 with linespoints pt 5 lw 2 lc rgb "#3465a4"

# (f) shares
set title "(f) background and border shares"
set style data histograms
set xtics autofreq
set autoscale x
set key inside top left
unset xlabel; set ylabel "share"
set yrange [0:1.05]
plot in index 6 using 2:xtic(1) lc rgb "#888a85", '' index 6 using 3 lc rgb "#cc0000", '' index 6 using 4 lc rgb "#f57900"
unset multiplot
