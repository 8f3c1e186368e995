# plots/panels/heatmap.gp — a matrix (rows = y, columns = x) as an image; marks: x positions
# drawn as vertical lines (delimiter or sink columns); symmetric: colour scale ±max|z|
load panels . 'common.gp'
if (symmetric) {   # before the axis ranges: stats honours them
  stats in index idx matrix using 3 nooutput
  zmax = (abs(STATS_min) > abs(STATS_max)) ? abs(STATS_min) : abs(STATS_max)
}
set xrange [-0.5:nx - 0.5]
set yrange [ny - 0.5:-0.5]
set tics out
set cblabel cblabel
if (logcb) { set logscale cb }
if (symmetric) {
  if (zmax == 0) { zmax = 1 }
  set cbrange [-zmax:zmax]
  set palette defined (-1 "#2166ac", 0 "white", 1 "#b2182b")
} else {
  set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
}
if (strlen(marks) > 0) {
  do for [m in marks] { set arrow from (m + 0), graph 0 to (m + 0), graph 1 nohead lc rgb "#204a87" dt 2 lw 1 front }
}
plot in index idx matrix with image notitle
