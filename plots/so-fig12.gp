# plots/so-fig12.gp — SO Fig. 12: training loss per step (running mean) of GPT-2 with each
# attention variant.
# usage: gnuplot -c plots/so-fig12.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-fig12.lua): one block per variant, "step" "<variant label>"
if (ARGC < 2) { print "usage: gnuplot -c so-fig12.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 8in,5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1000,620
}
set output out
stats in using 1 nooutput
N = STATS_blocks
set grid
set key top right autotitle columnhead
set xlabel "training step"; set ylabel "training loss (running mean)"
set title "Training loss by attention variant (SO Fig. 12, reproduced)"
plot for [i=0:N-1] in index i using 1:2 with lines lw 2 title columnheader(2)
