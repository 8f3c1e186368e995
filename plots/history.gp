# plots/history.gp — the training history of one cached model (lua/outlierlab/runner/history.lua):
# loss, learning rate, gradient norm and the outlier metrics measured during training.
# usage: gnuplot -c plots/history.gp history.dat out.png|out.pdf
# history.dat: index 0 = which panels have data ("train" "val" "curve", 1 or 0),
#   index 1 = "step" "loss" "lr" "grad_norm", index 2 = "step" "val_loss",
#   index 3 = "step" "max_inf_norm" "avg_kurtosis"
if (ARGC < 2) { print "usage: gnuplot -c history.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 9in,6in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1100,760
}
set output out
stats in index 0 using 1 nooutput
has_train = (STATS_max > 0.5)
stats in index 0 using 2 nooutput
has_val = (STATS_max > 0.5)
stats in index 0 using 3 nooutput
has_curve = (STATS_max > 0.5)
set datafile missing "NaN"
set grid
set key top right
set multiplot layout 2,2 title "Training history"

set title "loss"
set xlabel "training step"; set ylabel "cross-entropy"
if (has_train && has_val) {
  plot in index 1 using 1:2 with lines lw 1.5 title "training", \
       in index 2 using 1:2 with linespoints pt 7 ps 0.8 lw 1.5 title "validation"
} else { if (has_train) {
  plot in index 1 using 1:2 with lines lw 1.5 title "training"
} else {
  unset key; set label 1 "not recorded" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1; set key top right
} }

set title "learning rate"
set ylabel "learning rate"
if (has_train) {
  plot in index 1 using 1:3 with lines lw 1.5 notitle
} else {
  set label 1 "not recorded" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}

set title "gradient norm (before clipping)"
set ylabel "L2 norm"
if (has_train) {
  set logscale y
  plot in index 1 using 1:4 with lines lw 1 notitle
  unset logscale y
} else {
  set label 1 "not recorded" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}

set title "outlier metrics during training"
set ylabel "max inf norm / avg kurtosis"
if (has_curve) {
  set logscale y
  plot in index 3 using 1:2 with linespoints pt 7 ps 0.8 lw 1.5 title "max inf norm", \
       in index 3 using 1:3 with linespoints pt 5 ps 0.8 lw 1.5 title "avg kurtosis"
  unset logscale y
} else {
  set label 1 "not recorded by this trainer" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}
unset multiplot
