# plots/panels/bars.gp — columns x, y1..yk (clustered boxes) [, sd1..sdk: error bars ±sd]
# [, label y1..yk, label text1..textk: each bar's value above it]; labels on the axis when given.
# The y axis starts at zero (or the lowest bar; log axis: the decade below the smallest bar) and
# ends above the highest bar and its error bar.
load panels . 'common.gp'
if (xmax - xmin > 60) { set style fill solid 0.9 noborder } else { set style fill solid 0.8 border -1 }   # many thin bars: no outline
w = 0.8 / nseries
set boxwidth w absolute
set xrange [xmin - 0.5:xmax + 0.5]
if (!logy) { set yrange [ylo:yhi] } else { set yrange [ybase:*] }
if (nseries == 1) { unset key } else { set key below horizontal height 1 }
off(s) = (s - (nseries + 1) / 2.0) * w
plot for [s=1:nseries] in index idx using ($1 + off(s)):(column(s + 1)) with boxes lt s title columnheader(s + 1), \
     for [s=1:(has_err ? nseries : 0)] in index idx using ($1 + off(s)):(column(nseries + 1 + s) > 0 ? column(s + 1) - column(nseries + 1 + s) : NaN):(0):(2 * column(nseries + 1 + s)) \
         with vectors heads size screen 0.006,90 lc rgb "black" lw 1.2 notitle, \
     for [s=1:(has_vals ? nseries : 0)] in index idx using ($1 + off(s)):(column(1 + nseries * (1 + has_err) + s)):(stringcolumn(1 + nseries * (2 + has_err) + s)) with labels center font ",8" notitle
