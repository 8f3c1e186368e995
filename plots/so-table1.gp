# plots/so-table1.gp — SO Table 1: consistency between outlier types. (a) reproduced
# consistency per pair of outlier types beside SO's number and the chance level (missing bar
# = undefined: no type-1 outliers at this τ, or no number in the paper); (b) overlap of
# activation-outlier tokens with attention-outlier keys over the activation threshold τ;
# (c) the number of activation-outlier tokens over τ.
# usage: gnuplot -c plots/so-table1.gp in.dat out.png|out.pdf
# in.dat (written by experiments/so-table1.lua):
#   index 0: "pair" "reproduced" "SO Table 1" "chance"   (percent; NaN = undefined)
#   index 1: "tau" "h ~ A" "x_down ~ A" (percent) "h outlier tokens" "x_down outlier tokens"
if (ARGC < 2) { print "usage: gnuplot -c so-table1.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 12in,4.8in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1500,600
}
set output out
set datafile missing "NaN"
set multiplot layout 1,3 title "Consistency between outlier types (SO Table 1, reproduced)"
set title "consistency per pair of outlier types"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key top right autotitle columnhead font ",8"
set ylabel "consistency (%)"
set yrange [0:119]
set ytics 0, 20, 100
set xtics rotate by -35 font ",8"
plot in index 0 using 2:xtic(1) lc rgb "#cc0000", '' index 0 using 3 lc rgb "#888a85", '' index 0 using 4 lc rgb "#fce94f"
set style data linespoints
set xtics norotate font ""
set logscale x
set xrange [1500:1.5]
set xlabel "activation threshold tau (|x| > tau mean|x|)"
set title "overlap with attention outliers over tau"
set ylabel "overlap (%)"
set key top left
plot in index 1 using 1:2 pt 7 lc rgb "#a40000" title columnheader(2), \
     in index 1 using 1:3 pt 5 lc rgb "#204a87" title columnheader(3)
set title "activation-outlier tokens over tau"
set ylabel "outlier tokens (log scale; 0 not shown)"
set logscale y
set yrange [0.8:*]
set ytics autofreq
plot in index 1 using 1:($4 > 0 ? $4 : NaN) pt 7 lc rgb "#a40000" title columnheader(4), \
     in index 1 using 1:($5 > 0 ? $5 : NaN) pt 5 lc rgb "#204a87" title columnheader(5)
unset multiplot
