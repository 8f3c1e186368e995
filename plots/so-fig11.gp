# plots/so-fig11.gp — SO Fig. 11: top-3 and median |h_l| per layer, one panel per attention
# variant ((a) softmax, (b) fixed bias, (c) context-aware bias, (d) attention bias,
# (e) context-aware scaling, sigmoid attention).
# usage: gnuplot -c plots/so-fig11.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-fig11.lua): one block per variant,
#   "layer" "<variant label>" "top2" "top3" "median"
if (ARGC < 2) { print "usage: gnuplot -c so-fig11.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,7in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,900
}
set output out
stats in using 1 nooutput
N = STATS_blocks
set grid ytics
set logscale y
set xtics 1
set xlabel "layer"; set ylabel "|h| (log scale)"
set key top left
set multiplot layout 2,3 title "Top-3 and median |h| per layer by attention variant (SO Fig. 11, reproduced)"
do for [i=0:N-1] {
  plot in index i using 1:2 with linespoints pt 7 lc rgb "#a40000" title columnheader(2), \
       in index i using 1:3 with linespoints pt 5 lc rgb "#f57900" title "top-2", \
       in index i using 1:4 with linespoints pt 9 lc rgb "#c4a000" title "top-3", \
       in index i using 1:5 with linespoints pt 13 lc rgb "#204a87" title "median"
}
unset multiplot
