# plots/so-fig3.gp — SO Fig. 3: activation outliers in the layer outputs h_l of a
# LLaMA-style model: (a) top-3 and median |h| per layer, (b) outlier tokens by category,
# (c) outlier channels.
# usage: gnuplot -c plots/so-fig3.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-fig3.lua):
#   index 0: "layer" "top1" "top2" "top3" "median"
#   index 1: "category" "outlier tokens"
#   index 2: "channel" "outlier count"
if (ARGC < 2) { print "usage: gnuplot -c so-fig3.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,4.5in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,560
}
set output out
set key autotitle columnhead top left
set grid ytics
set multiplot layout 1,3 title "Activation outliers in h_l (SO Fig. 3, reproduced)"
set title "largest |h| per layer"
set xlabel "layer"; set ylabel "|h| (log scale)"
set logscale y
set xtics 1
plot in index 0 using 1:2 with linespoints pt 7 lc rgb "#a40000" title columnheader(2), \
     in index 0 using 1:3 with linespoints pt 5 lc rgb "#f57900" title columnheader(3), \
     in index 0 using 1:4 with linespoints pt 9 lc rgb "#c4a000" title columnheader(4), \
     in index 0 using 1:5 with linespoints pt 13 lc rgb "#204a87" title columnheader(5)
unset logscale y
set title "outlier tokens by category"
set xlabel "token category"; set ylabel "outlier tokens"
set yrange [0:*]
set style fill solid 0.8 border -1
set boxwidth 0.6
set xtics autofreq
set offsets 0.6, 0.6, 0, 0
plot in index 1 using 0:2:xtic(1) with boxes lc rgb "#3465a4" title columnheader(2)
set offsets 0, 0, 0, 0
set title "outlier channels"
set xlabel "channel"; set ylabel "outlier count"
set xrange [-0.5:*]
plot in index 2 using 1:2 with impulses lw 2 lc rgb "#cc0000" title columnheader(2)
unset multiplot
