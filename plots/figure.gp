# plots/figure.gp — every figure declared with outlierlab.figure: the panels of
# <name>.panels.gp (written next to the data by lua/outlierlab/figure/init.lua) in a rows × cols
# layout that follows the number of panels, each drawn by plots/panels/<kind>.gp
# (line, bars, histogram, scatter, heatmap, rgb; empty: a frame that says why).
# usage: gnuplot -c plots/figure.gp in.dat out.png|out.pdf   (reads in.dat's <name>.panels.gp)
if (ARGC < 2) { print "usage: gnuplot -c figure.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
spec = in[1:strlen(in) - 4] . ".panels.gp"
panels = ARG0[1:strstrt(ARG0, "figure.gp") - 1] . "panels/"
stage = 1
load spec
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,7" size (cols * 4.2)in, (rows * 3.2 + 0.4)in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,9" size (cols * 520), (rows * 400 + 50)
}
set output out
set multiplot layout rows, cols title fig_title font ",12"
stage = 2
load spec
unset multiplot
