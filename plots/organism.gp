# plots/organism.gp — the model organism's recipe map: sink share, the sink's value ratio,
# top-1/median |h| at the sink token and average kurtosis against the training step, one line
# per trained model (the default recipe of each family and its one-knob variations), with the
# thresholds of a model organism as dashed lines.
# usage: gnuplot -c plots/organism.gp in.dat out.png|out.pdf
# in.dat (written by experiments/organism.lua): one block per model,
#   "step" "<label>" x4   rows: step, sink share, value ratio, top-1/median at sink, avg kurtosis
if (ARGC < 2) { print "usage: gnuplot -c organism.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,7" size 11in,7.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,9" size 1500,1000
}
set output out
stats in using 1 nooutput
N = STATS_blocks
XMAX = STATS_max
# 16 distinct colours (tab20's dark and light pairs), so that no two models share a line colour;
# the point type changes too, for print in grey
C = "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf #aec7e8 #ffbb78 #98df8a #ff9896 #c5b0d5 #c49c94"
lc(i) = word(C, (i % 16) + 1)
pt(i) = (i % 7) + 4
set grid
set xrange [0:XMAX]
set xlabel "training step"
set key outside right top autotitle columnhead font ",8" spacing 0.9
set multiplot layout 2,2 title "Model organism: heads learning to do nothing, by family and knob (dashed: thresholds)"
set title "largest sink share of a head (one sink token)"
set ylabel "attention share"
set yrange [0:1.02]
plot for [i=0:N-1] in index i using 1:2 with linespoints lc rgb lc(i) pt pt(i) ps 0.5 lw 1.5 title columnheader(2), \
     0.8 with lines dt 2 lc rgb "black" notitle
set title "value norm at that head's sink / median value norm"
set ylabel "ratio (log)"
set logscale y
set yrange [*:*]
plot for [i=0:N-1] in index i using 1:3 with linespoints lc rgb lc(i) pt pt(i) ps 0.5 lw 1.5 notitle, \
     0.2 with lines dt 2 lc rgb "black" notitle
set title "top-1 / median |h| at the sink token (largest over layers)"
set ylabel "ratio (log)"
plot for [i=0:N-1] in index i using 1:4 with linespoints lc rgb lc(i) pt pt(i) ps 0.5 lw 1.5 notitle, \
     100 with lines dt 2 lc rgb "black" notitle
set title "average kurtosis of the layer outputs"
set ylabel "kurtosis (log; Gaussian = 3)"
plot for [i=0:N-1] in index i using 1:5 with linespoints lc rgb lc(i) pt pt(i) ps 0.5 lw 1.5 notitle, \
     30 with lines dt 2 lc rgb "black" notitle
unset multiplot
