# plots/qt-fig2.gp — QT Fig. 2: the attention head that owns the top outlier dimension:
# (a) attention probabilities, (b) value vectors, (c) their product (the head's output),
# (d) per key token: attention received and value norm (delimiters are the "no-op" keys).
# usage: gnuplot -c plots/qt-fig2.gp in.dat out.png|out.pdf
# in.dat (written by experiments/qt-fig2.lua):
#   index 0: matrix T×T   attention probabilities (row = query, column = key)
#   index 1: matrix T×HD  value vectors (row = token)
#   index 2: matrix T×HD  attention output A·V (row = query)
#   index 3: "key" "token" "attention received" "value norm" "delimiter"
if (ARGC < 2) { print "usage: gnuplot -c qt-fig2.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 11in,8in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1400,1000
}
set output out
set multiplot layout 2,2 title "Outlier head: attention probabilities, values and their product (QT Fig. 2, reproduced)"
set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
set autoscale fix
set yrange [*:*] reverse
set title "attention probabilities"
set xlabel "key position"; set ylabel "query position"
plot in index 0 matrix with image notitle
set palette defined (-1 "#204a87", 0 "white", 1 "#a40000")
set title "values"
set xlabel "head dimension"; set ylabel "token position"
plot in index 1 matrix with image notitle
set title "attention output (probabilities × values)"
set xlabel "head dimension"; set ylabel "query position"
plot in index 2 matrix with image notitle
unset yrange
set yrange [0:*] noreverse
set autoscale xfix
set title "per key token"
set xlabel "key position"; set ylabel "mean attention received"
set y2label "value norm"
set y2tics
set ytics nomirror
set key autotitle columnhead top right
set style fill solid 0.6 border -1
set boxwidth 0.8
plot in index 3 using 1:($5 > 0 ? $3 : 1/0) with boxes lc rgb "#cc0000" title "attention received (delimiter key)", \
     in index 3 using 1:($5 > 0 ? 1/0 : $3) with boxes lc rgb "#3465a4" title "attention received (other key)", \
     in index 3 using 1:4 axes x1y2 with linespoints pt 7 ps 0.5 lc rgb "black" title "value norm"
unset multiplot
