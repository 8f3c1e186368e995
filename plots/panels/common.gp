# plots/panels/common.gp — the state every panel starts from (loaded by each panel template):
# titles (with the note as a second line) and labels of the panel, log axes, axes that end at
# the data, integer tick steps on integer axes (xstep / ystep), tick labels of a categorical
# axis (xtics_cmd / ytics_cmd), a palette of strong colours for the series, no key for one series.
reset
if (strlen(pnote) > 0) { set title ptitle . "\n" . pnote } else { set title ptitle }
set xlabel pxlabel
set ylabel pylabel
set grid ytics lc rgb "#dddddd"
set key top right noautotitle
set autoscale fix
set format cb "%g"
set linetype 1 lc rgb "#0072b2" lw 1.5 pt 7 ps 0.6
set linetype 2 lc rgb "#d55e00" lw 1.5 pt 5 ps 0.6
set linetype 3 lc rgb "#009e73" lw 1.5 pt 9 ps 0.7
set linetype 4 lc rgb "#cc79a7" lw 1.5 pt 13 ps 0.7
set linetype 5 lc rgb "#e69f00" lw 1.5 pt 11 ps 0.7
set linetype 6 lc rgb "#56b4e9" lw 1.5 pt 7 ps 0.6
set linetype 7 lc rgb "#000000" lw 1.5 pt 5 ps 0.6
set linetype 8 lc rgb "#882255" lw 1.5 pt 9 ps 0.7
set linetype cycle 8
if (xstep > 0) { set xtics xstep }
if (ystep > 0) { set ytics ystep }
if (logx) { set logscale x }
if (logy) { set logscale y }
if (strlen(xtics_cmd) > 0) { eval xtics_cmd }
if (strlen(ytics_cmd) > 0) { eval ytics_cmd }
