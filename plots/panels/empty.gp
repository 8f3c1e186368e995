# plots/panels/empty.gp — a panel without data: its frame and the reason (empty_msg)
load panels . 'common.gp'
unset logscale
set xrange [0:1]
set yrange [0:1]
unset xtics
unset ytics
unset grid
set label 1 empty_msg at graph 0.5, 0.5 center font ",10" tc rgb "#555555"
plot 2 notitle
