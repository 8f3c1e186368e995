# plots/panels/histogram.gp — columns: bin centre, counts (boxes as wide as the bins)
load panels . 'common.gp'
set style fill solid 0.7 border -1
set boxwidth 0.95 relative
if (!logy) { set yrange [0:*] } else { set autoscale ymin }
set key autotitle columnhead
if (nseries == 1) { unset key }
plot for [s=1:nseries] in index idx using 1:(column(s + 1)) with boxes title columnheader(s + 1)
