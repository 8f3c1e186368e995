# plots/history.gp — the training history of one cached model (lua/outlierlab/runner/history.lua):
# loss, gradient norm, and the four phenomena the model organism is judged by, with their
# thresholds (lua/outlierlab/judge/thresholds.lua, written into the data) and the final window.
# usage: gnuplot -c plots/history.gp history.dat out.png|out.pdf
# history.dat: index 0 = which panels have data ("train" "val" "curve" "phenomena" "sink_rate"
#   "max_kurtosis" "lr_varies" "max_inf_norm" "stale", 1 or 0; stale: the tracked curve was measured by
#   other code than the tree's, recipes/track.lua), index 1 = "step" "loss" "lr" "grad_norm",
#   index 2 = "step" "val_loss", index 3 = "step" "max_inf_norm" "avg_kurtosis" "sink_share"
#   "value_ratio" "massive_ratio" "sink_rate" "max_kurtosis", index 4 = the thresholds, the final
#   window (from, to) and its means, the last learning rate (one row)
if (ARGC < 2) { print "usage: gnuplot -c history.gp in.dat out.(png|pdf)"; exit status 1 }
in = ARG1; out = ARG2
set encoding utf8
if (out[strlen(out)-3:] eq ".pdf") {
  set terminal pdfcairo noenhanced color font "DejaVu Sans,8" size 9in,9in
} else {
  set terminal pngcairo noenhanced color font "DejaVu Sans,10" size 1100,1050
}
set output out
stats in index 0 using 1 nooutput
has_train = (STATS_max > 0.5)
stats in index 0 using 2 nooutput
has_val = (STATS_max > 0.5)
stats in index 0 using 3 nooutput
has_curve = (STATS_max > 0.5)
stats in index 0 using 4 nooutput
has_phen = (STATS_max > 0.5)
stats in index 0 using 5 nooutput
has_rate = (STATS_max > 0.5)
stats in index 0 using 6 nooutput
has_maxk = (STATS_max > 0.5)
stats in index 0 using 7 nooutput
lr_varies = (STATS_max > 0.5)
stats in index 0 using 8 nooutput
has_inf = (STATS_max > 0.5)
stats in index 0 using 9 nooutput
stale = (STATS_max > 0.5)
set datafile missing "NaN"
# index 4 is one row: a value recorded as NaN (e.g. no sink, so no sink value) leaves stats without a
# valid point and STATS_max undefined; it is kept as NaN
stats in index 4 using 1 nooutput
th_sink = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 2 nooutput
th_value = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 3 nooutput
th_massive = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 4 nooutput
th_kurt = exists("STATS_max") ? STATS_max : NaN
# the final window and its means: NaN (no phenomena) reads as invalid, kept as NaN
fin_from = NaN; fin_to = NaN; f_sink = NaN; f_value = NaN; f_massive = NaN; f_kurt = NaN; f_rate = NaN; lr_last = NaN
if (has_curve) {
  stats in index 4 using 5 nooutput
  fin_from = exists("STATS_max") ? STATS_max : NaN
  stats in index 4 using 6 nooutput
  fin_to = exists("STATS_max") ? STATS_max : NaN
}
if (has_phen) {
  stats in index 4 using 7 nooutput
  f_sink = exists("STATS_max") ? STATS_max : NaN
  stats in index 4 using 8 nooutput
  f_value = exists("STATS_max") ? STATS_max : NaN
  stats in index 4 using 9 nooutput
  f_massive = exists("STATS_max") ? STATS_max : NaN
}
if (has_curve) {
  stats in index 4 using 10 nooutput
  f_kurt = exists("STATS_max") ? STATS_max : NaN
}
if (has_rate) {
  stats in index 4 using 11 nooutput
  f_rate = exists("STATS_max") ? STATS_max : NaN
}
if (has_train) {
  stats in index 4 using 12 nooutput
  lr_last = exists("STATS_max") ? STATS_max : NaN
}
# the log-scale ranges of the phenomena panels (runner/history.lua: the curve and the threshold)
stats in index 4 using 13 nooutput
v_lo = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 14 nooutput
v_hi = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 15 nooutput
m_lo = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 16 nooutput
m_hi = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 17 nooutput
k_lo = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 18 nooutput
k_hi = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 19 nooutput
i_lo = exists("STATS_max") ? STATS_max : NaN
stats in index 4 using 20 nooutput
i_hi = exists("STATS_max") ? STATS_max : NaN
verdict(v, th, above) = (v != v) ? "" : ((above ? v >= th : v <= th) ? " — reached" : " — not reached")
# a panel's title: the quantity, then its final mean and the verdict when it was recorded
ttl(base, fmt, v, th, above) = (v != v) ? base : sprintf("%s (final %s%s)", base, sprintf(fmt, v), verdict(v, th, above))
set grid
set key top right
mtitle = "Training history: loss, gradient norm and the phenomena (dashed: threshold; grey band: the final window, the last 10 % of tracked steps, whose mean is judged)"
if (stale) { mtitle = "STALE: the phenomena were measured by older code; rerun the experiment with --refresh_curves\n" . mtitle }
set multiplot layout 3,2 title mtitle

set style rect fc rgb "#e8e8e8" fs solid 1.0 noborder

set title "loss"
set xlabel "training step"; set ylabel "cross-entropy"
if (has_train && !lr_varies) {
  set label 2 sprintf("learning rate constant at %.3g", lr_last) at graph 0.03, graph 0.06 left front
}
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
unset label 2

if (lr_varies) { set title "gradient norm (before clipping) and learning rate" } else { set title "gradient norm (before clipping)" }
set ylabel "L2 norm"
if (has_train) {
  set logscale y
  if (lr_varies) {
    set y2label "learning rate"; set y2tics; set ytics nomirror
    plot in index 1 using 1:4 with lines lw 1 title "gradient norm", \
         in index 1 using 1:3 axes x1y2 with lines lw 1.5 lc rgb "#d95f02" title "learning rate"
    unset y2label; unset y2tics; set ytics mirror
  } else {
    plot in index 1 using 1:4 with lines lw 1 notitle
  }
  unset logscale y
} else {
  set label 1 "not recorded" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}

if (has_curve) { set object 1 rect from first fin_from, graph 0 to first fin_to, graph 1 back }
set title ttl("attention sink: largest sink share of a head", "%.2f", f_sink, th_sink, 1)
set ylabel "share of attention on the sink"
if (has_phen) {
  set yrange [0:1.05]
  set key bottom right
  if (has_rate) {
    plot in index 3 using 1:4 with linespoints pt 7 ps 0.7 lw 1.5 title "sink share", \
         in index 3 using 1:7 with linespoints pt 5 ps 0.7 lw 1.5 title sprintf("sink rate (Gu et al.; final %.2f)", f_rate), \
         th_sink with lines dt 2 lw 1.5 lc rgb "#b2182b" title sprintf("threshold %g", th_sink)
  } else {
    plot in index 3 using 1:4 with linespoints pt 7 ps 0.7 lw 1.5 title "sink share", \
         th_sink with lines dt 2 lw 1.5 lc rgb "#b2182b" title sprintf("threshold %g", th_sink)
  }
  set autoscale y
  set key top right
} else {
  set label 1 "not recorded by this trainer" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}

set title ttl("value drain: sink value norm / median value norm", "%.2f", f_value, th_value, 0)
set ylabel "value norm ratio (log scale)"
# the ratio is NaN at a step with no sink head; a model that never had one has no curve to draw
has_value = 0
if (has_phen) {
  stats in index 3 using 5 nooutput
  has_value = exists("STATS_max")
}
if (has_phen && !has_value) {
  set label 1 "no sink head at any tracked step: no sink value to measure" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
} else { if (has_phen) {
  set logscale y
  set yrange [v_lo : v_hi]
  plot in index 3 using 1:5 with linespoints pt 7 ps 0.7 lw 1.5 lc rgb "#1b9e77" title "value ratio of the sink head", \
       th_value with lines dt 2 lw 1.5 lc rgb "#b2182b" title sprintf("threshold %g (at most)", th_value)
  unset logscale y; set autoscale y
} else {
  set label 1 "not recorded by this trainer" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
} }

set title ttl("massive activation: top-1 / median |h| at the sink token", "%.0f", f_massive, th_massive, 1)
set ylabel "top-1 / median |h| (log scale)"
if (has_phen) {
  set logscale y
  set yrange [m_lo : m_hi]
  set key top left
  plot in index 3 using 1:6 with linespoints pt 7 ps 0.7 lw 1.5 lc rgb "#7570b3" title "massive ratio", \
       th_massive with lines dt 2 lw 1.5 lc rgb "#b2182b" title sprintf("threshold %g", th_massive)
  unset logscale y; set autoscale y; set key top right
} else {
  set label 1 "not recorded by this trainer" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}

set title ttl("kurtosis of the layer outputs h", "average %.1f", f_kurt, th_kurt, 1)
set ylabel "kurtosis (log scale)"
if (has_curve) {
  set logscale y
  set logscale y2
  set yrange [k_lo : k_hi]
  set y2range [i_lo : i_hi]
  set key top left
  set y2label "max inf norm (log scale)"; set y2tics; set ytics nomirror
  # the right axis narrows this panel: a round step of at most six intervals keeps 5-digit labels apart
  if (fin_to == fin_to && fin_to > 0) {
    xraw = fin_to / 6.0; xp = 10**floor(log10(xraw)); xm = xraw / xp
    xinc = (xm <= 1 ? 1 : xm <= 2 ? 2 : xm <= 2.5 ? 2.5 : xm <= 5 ? 5 : 10) * xp
    set xtics xinc; set autoscale xfix
  }
  # the optional series: a column of NaN is skipped (its title too)
  plot in index 3 using 1:3 with linespoints pt 7 ps 0.7 lw 1.5 lc rgb "#e7298a" title "average kurtosis", \
       in index 3 using 1:(has_maxk ? $8 : NaN) with lines lw 1 dt 3 lc rgb "#e7298a" title (has_maxk ? "largest layer's kurtosis" : ""), \
       in index 3 using 1:(has_inf ? $2 : NaN) axes x1y2 with linespoints pt 5 ps 0.5 lw 1 lc rgb "#666666" title (has_inf ? "max inf norm (right axis)" : ""), \
       th_kurt with lines dt 2 lw 1.5 lc rgb "#b2182b" title sprintf("threshold %g", th_kurt)
  unset logscale y; unset logscale y2; unset y2label; unset y2tics; set ytics mirror; set xtics autofreq; set autoscale x
  set autoscale y; set autoscale y2; set key top right
} else {
  set label 1 "not recorded by this trainer" at graph 0.5, 0.5 center
  plot [0:1][0:1] NaN notitle
  unset label 1
}
unset object 1
unset multiplot
