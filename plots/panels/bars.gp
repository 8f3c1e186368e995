# plots/panels/bars.gp — columns x, y1..yk (clustered boxes), labels on the axis when given
load panels . 'common.gp'
set style fill solid 0.8 border -1
w = 0.8 / nseries
set boxwidth w absolute
set xrange [xmin - 0.5:xmax + 0.5]
if (!logy) { set yrange [0:*] } else { set autoscale ymin }
set key autotitle columnhead
if (nseries == 1) { unset key }
plot for [s=1:nseries] in index idx using ($1 + (s - (nseries + 1) / 2.0) * w):(column(s + 1)) with boxes title columnheader(s + 1)
