# plots/panels/scatter.gp — columns x, y: one point each
load panels . 'common.gp'
set offsets graph 0.02, graph 0.02, graph 0.02, graph 0.02
plot in index idx using 1:2 with points pt 7 ps 0.7 lc rgb "#cc0000" notitle
