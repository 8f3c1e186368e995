# plots/panels/line.gp — columns x, y1..yk [, sd1..sdk] (one line each, titled by its column
# header; with has_err the standard deviations as error bars); x spans the drawn points
load panels . 'common.gp'
if (xmin < xmax) { set xrange [xmin:xmax] } else { if (logx) { set xrange [xmin / 2:xmax * 2] } else { set xrange [xmin - 0.5:xmax + 0.5] } }
set offsets 0, 0, graph 0.04, graph 0.04   # the highest and lowest points off the frame
if (yset) { set yrange [ylo:yhi] }   # same_y: the extent of every panel of the declaration
if (nseries == 1) { unset key } else { set key below horizontal height 1 }
if (has_err) {
  plot for [s=1:nseries] in index idx using 1:(column(s + 1)):(column(nseries + 1 + s)) with yerrorlines lt s title columnheader(s + 1)
} else {
  if (npts > 60) {   # many points: lines only
    plot for [s=1:nseries] in index idx using 1:(column(s + 1)) with lines lt s title columnheader(s + 1)
  } else {
    plot for [s=1:nseries] in index idx using 1:(column(s + 1)) with linespoints lt s title columnheader(s + 1)
  }
}
