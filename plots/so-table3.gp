# plots/so-table3.gp — SO Table 3 at reduced scale: perplexity in full precision, after
# AbsMax W8 and after 50 % magnitude pruning (left), and the same relative to FP (right),
# default GPT-2 vs context-aware scaling.
# usage: gnuplot -c plots/so-table3.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-table3.lua): one block,
#   "model" "FP" "AbsMax W8" "50% sparse"  rows: one per model
if (ARGC < 2) { print "usage: gnuplot -c so-table3.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 11in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1400,560
}
set output out
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set key top left autotitle columnhead
set multiplot layout 1,2 title "GPT-2 under compression (SO Table 3, reduced scale)"
set title "held-out perplexity"
set logscale y
set ylabel "perplexity (log scale)"
plot in index 0 using 2:xtic(1), '' index 0 using 3, '' index 0 using 4
unset logscale y
set title "relative to full precision"
set ylabel "perplexity / FP perplexity"
plot in index 0 using ($3/$2):xtic(1) title "AbsMax W8", '' index 0 using ($4/$2) title "50% sparse"
unset multiplot
