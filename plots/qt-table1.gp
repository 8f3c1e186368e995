# plots/qt-table1.gp — QT Table 1 at reduced scale: max inf norm, average kurtosis and the
# W8A8 degradation for each clipped-softmax stretch (gamma, zeta) of the BERT-style model.
# usage: gnuplot -c plots/qt-table1.gp in.dat out.png|out.pdf
# in.dat (written by experiments/qt-table1.lua): one block,
#   "gamma, zeta" "BERT max inf norm" "avg kurtosis" "|W8A8 - FP|"  rows: one per (gamma, zeta)
if (ARGC < 2) { print "usage: gnuplot -c qt-table1.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,560
}
set output out
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -30
set key off
set multiplot layout 1,3 title "Clipped softmax stretch factors on the BERT-style model (QT Table 1, reduced scale)"
set title "max inf norm"
plot in index 0 using 2:xtic(1) lc rgb "#a40000"
set title "average kurtosis (Gaussian = 3)"
plot in index 0 using 3:xtic(1) lc rgb "#204a87"
set title "|W8A8 - FP| perplexity"
plot in index 0 using 4:xtic(1) lc rgb "#4e9a06"
unset multiplot
