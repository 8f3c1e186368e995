# plots/so-fig6.gp — SO Fig. 6: attention outliers (keys with large cumulative attention)
# (a) per layer, (b) by key token category, (c) per layer and head.
# usage: gnuplot -c plots/so-fig6.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-fig6.lua):
#   index 0: "layer" "attention outliers"
#   index 1: "category" "attention outliers"
#   index 2: matrix n_layer × n_head of outlier counts
if (ARGC < 2) { print "usage: gnuplot -c so-fig6.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,560
}
set output out
set key autotitle columnhead top right
set grid ytics
set style fill solid 0.8 border -1
set boxwidth 0.6
set multiplot layout 1,3 title "Attention outliers (SO Fig. 6, reproduced)"
set title "per layer"
set xlabel "layer"; set ylabel "attention outliers"
set yrange [0:*]
set xtics 1
plot in index 0 using 1:2 with boxes lc rgb "#3465a4" title columnheader(2)
set title "by key token category"
set xlabel "key token category"
set xtics autofreq
set offsets 0.6, 0.6, 0, 0
plot in index 1 using 0:2:xtic(1) with boxes lc rgb "#cc0000" title columnheader(2)
set offsets 0, 0, 0, 0
set title "per layer and head"
set xlabel "head"; set ylabel "layer"
set autoscale fix
set yrange [*:*] reverse
set xtics 1; set ytics 1
set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
plot in index 2 matrix with image notitle
unset multiplot
