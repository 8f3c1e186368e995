# plots/panels/heatmap.gp — a matrix (rows = y, columns = x) as an image; marks: x positions
# drawn as vertical lines (delimiter or sink columns); symmetric: colour scale ±max|z|; else the
# scale runs from the smallest to the largest value (from zero for a constant map, which is then
# one colour of the scale, not its middle); cell_fmt: each cell's value written in it
load panels . 'common.gp'
set xrange [-0.5:nx - 0.5]
set yrange [ny - 0.5:-0.5]
set tics out
if (strlen(cblabel) > 0) {   # beside the colour box, with room for it inside the panel
  set cblabel cblabel offset 1.5,0
  set rmargin 13
}
if (logcb) { set logscale cb }
if (symmetric) {
  zm = (zabs > 0) ? zabs : 1
  set cbrange [-zm:zm]
  set palette defined (-1 "#2166ac", 0 "white", 1 "#b2182b")
} else {
  lo = zmin; hi = zmax
  if (hi <= lo) { if (lo == 0) { hi = 1 } else { if (lo > 0) { lo = 0 } else { hi = 0 } } }
  if (logcb && lo <= 0) { set autoscale cb } else { set cbrange [lo:hi] }
  set palette defined (0 "white", 1 "#fce94f", 2 "#f57900", 3 "#a40000")
}
if (strlen(marks) > 0) {
  do for [m in marks] { set arrow from (m + 0), graph 0 to (m + 0), graph 1 nohead lc rgb "#204a87" dt 2 lw 1 front }
}
if (strlen(cell_fmt) > 0) {
  # white text on the dark end of the scale
  dark(z) = symmetric ? (abs(z) > 0.6 * zm) : ((z - lo) > 0.6 * (hi - lo))
  plot in index idx matrix with image notitle, \
       in index idx matrix using 1:2:(sprintf(cell_fmt, $3)):(dark($3) ? 0xffffff : 0x000000) with labels font ",9" tc rgb variable notitle
} else {
  plot in index idx matrix with image notitle
}
