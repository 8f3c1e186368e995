# plots/qt-table2.gp — QT Table 2 at reduced scale: max inf norm, average kurtosis and the
# W8A8 degradation per attention variant, one panel per model family.
# usage: gnuplot -c plots/qt-table2.gp in.dat out.png|out.pdf
# in.dat (written by experiments/qt-table2.lua): one block per family,
#   "variant" "<family> max inf norm" "avg kurtosis" "|W8A8 - FP|"  rows: one per variant
if (ARGC < 2) { print "usage: gnuplot -c qt-table2.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 11in,4in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,520
}
set output out
stats in using 2 nooutput
N = STATS_blocks
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set key top left autotitle columnhead
set multiplot layout 1,N title "Outliers and W8A8 degradation by attention variant (QT Table 2, reduced scale)"
names = "BERT OPT ViT"
do for [i=0:N-1] {
  set title word(names, i+1)
  plot in index i using 2:xtic(1) title "max inf norm", '' index i using 3 title "avg kurtosis", \
       '' index i using 4 title "|W8A8 - FP metric|"
}
unset multiplot
