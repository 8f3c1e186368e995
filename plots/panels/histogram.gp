# plots/panels/histogram.gp — columns: bin centre, counts (boxes as wide as the bins)
load panels . 'common.gp'
set style fill solid 0.7 border -1
set boxwidth 0.95 relative
if (!logy) { set yrange [0:*] } else { set autoscale ymin }
if (nseries == 1) { unset key } else { set key below horizontal height 1 }
plot for [s=1:nseries] in index idx using 1:(column(s + 1)) with boxes lt s title columnheader(s + 1)
