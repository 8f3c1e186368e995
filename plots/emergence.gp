# plots/emergence.gp — outlier emergence over training: max inf norm and kurtosis (QT
# definitions) against the training step, one line per attention variant.
# usage: gnuplot -c plots/emergence.gp in.dat out.png|out.pdf
# in.dat (written by experiments/emergence.lua): one block per variant,
#   "step" "<variant>" "<variant>"  rows: step, max inf norm, avg kurtosis
if (ARGC < 2) { print "usage: gnuplot -c emergence.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 11in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1400,560
}
set output out
set key autotitle columnhead top left
stats in using 1 nooutput
N = STATS_blocks
set grid
set multiplot layout 1,2 title "Outlier emergence during training, vanilla softmax against the variants"
set title "max inf norm"
set xlabel "training step"; set ylabel "max |x|"
set logscale y
plot for [i=0:N-1] in index i using 1:2 with linespoints pt 7 ps 0.6 lw 2 title columnheader(2)
set title "average kurtosis"
set ylabel "kurtosis (Gaussian = 3)"
plot for [i=0:N-1] in index i using 1:3 with linespoints pt 7 ps 0.6 lw 2 title columnheader(3)
unset multiplot
