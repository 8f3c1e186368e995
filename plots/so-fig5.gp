# plots/so-fig5.gp — SO Fig. 5: weight outliers. (a) column extremal ratio (max over columns
# of max|W|/mean|W| in the column) per layer and module as grouped bars, (b) the same as a
# heat map, (c) per-column ratio of W_down at the layer with the largest W_down ratio.
# usage: gnuplot -c plots/so-fig5.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-fig5.lua):
#   index 0: "layer" "q" "k" "v" "o" "gate" "up" "down"   (one row per layer)
#   index 1: matrix n_layer × 7 of the same ratios
#   index 2: "column" "W_down layer L: max/mean per column"
if (ARGC < 2) { print "usage: gnuplot -c so-fig5.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,560
}
set output out
set multiplot layout 1,3 title "Weight outliers: extremal ratio per layer and module (SO Fig. 5, reproduced)"
set title "extremal ratio per layer and module"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key bmargin center horizontal autotitle columnhead font ",8"
set ylabel "max over columns of max|W| / mean|W|"
set yrange [0:*]
plot in index 0 using 2:xtic(1) lc rgb "#729fcf", '' index 0 using 3 lc rgb "#3465a4", \
     '' index 0 using 4 lc rgb "#204a87", '' index 0 using 5 lc rgb "#8ae234", \
     '' index 0 using 6 lc rgb "#fcaf3e", '' index 0 using 7 lc rgb "#c17d11", \
     '' index 0 using 8 lc rgb "#cc0000"
set style data points
unset grid
set title "heat map (layer × module)"
set xlabel "module"; set ylabel "layer"
set autoscale fix
set yrange [*:*] reverse
set xtics ("q" 0, "k" 1, "v" 2, "o" 3, "gate" 4, "up" 5, "down" 6)
set ytics 1
set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
set cblabel "extremal ratio"
plot in index 1 matrix with image notitle, \
     in index 1 matrix using 1:2:(sprintf("%.1f", $3)) with labels font ",8" notitle
unset yrange; set yrange [0:*] noreverse
set xrange [*:*]; set autoscale x
set xtics autofreq; set ytics autofreq
set grid ytics
set key inside top right
set autoscale xfix
set title "W_down: ratio per column (x_down channel)"
set xlabel "column of W_down"; set ylabel "max|W| / mean|W| in the column"
plot in index 2 using 1:2 with impulses lw 1 lc rgb "#cc0000" title columnheader(2)
unset multiplot
