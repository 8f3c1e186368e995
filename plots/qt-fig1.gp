# plots/qt-fig1.gp — QT Fig. 1: 6σ outlier counts at the FFN output (before the residual sum)
# of the last two layers, (a) by token and (b) by hidden dimension.
# usage: gnuplot -c plots/qt-fig1.gp in.dat out.png|out.pdf
# in.dat (written by experiments/qt-fig1.lua), four blocks:
#   index 0: "token" "<layer label>"      top tokens of the second-to-last layer
#   index 1: "channel" "<layer label>"    count per hidden dimension, same layer
#   index 2, 3: the same for the last layer
if (ARGC < 2) { print "usage: gnuplot -c qt-fig1.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 11in,7in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1400,900
}
set output out
set key autotitle columnhead top right
set style fill solid 0.8 border -1
set boxwidth 0.7
set grid ytics
set multiplot layout 2,2 title "6σ outliers at the FFN output of the last two layers (QT Fig. 1, reproduced)"
do for [L=0:1] {
  set xlabel "token"
  set ylabel "outlier count"
  set xtics rotate by 45 right
  set yrange [0:*]
  set xrange [*:*]
  set offsets 0.6, 0.6, 0, 0
  plot in index 2*L using 0:2:xtic(1) with boxes lc rgb "#3465a4" title columnheader(2)
  set xlabel "hidden dimension"
  set xtics norotate autofreq
  set xrange [-0.5:*]
  set offsets 0, 0, 0, 0
  plot in index 2*L+1 using 1:2 with impulses lw 2 lc rgb "#cc0000" title columnheader(2)
}
unset multiplot
