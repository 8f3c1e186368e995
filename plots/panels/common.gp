# plots/panels/common.gp — the state every panel starts from (loaded by each panel template):
# titles and labels of the panel, log axes, axes that end at the data, tick labels of a
# categorical axis (xtics_cmd / ytics_cmd), no key for a single series.
reset
set title ptitle
set xlabel pxlabel
set ylabel pylabel
set grid ytics lc rgb "#dddddd"
set key top right noautotitle
set autoscale fix
set format cb "%g"
if (int_x) { set xtics 1 }
if (int_y) { set ytics 1 }
if (logx) { set logscale x }
if (logy) { set logscale y }
if (strlen(xtics_cmd) > 0) { eval xtics_cmd }
if (strlen(ytics_cmd) > 0) { eval ytics_cmd }
