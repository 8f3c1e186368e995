# plots/panels/line.gp — columns x, y1..yk (one line each, titled by its column header)
load panels . 'common.gp'
set key autotitle columnhead
if (nseries == 1) { unset key } else { set key below }
plot for [s=1:nseries] in index idx using 1:(column(s + 1)) with linespoints pt 7 ps 0.6 lw 1.5 title columnheader(s + 1)
