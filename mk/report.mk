# mk/report.mk — the outlier report of one model (docs/reference/report.md).
#   make report MODEL=DIR|FILE.bin|cache/models/<hash> [TEXT=FILE] [REPORT_ARGS="--tau=1000 --batches=8"]
#     MODEL: a Hugging Face directory, a llama2.c checkpoint (its tokenizer.bin beside it) or a
#     model of the cache; TEXT: the text it reads (default: the King James Bible where the
#     tokenizer fits it; a model of the cache reads its own held-out data).
#     Writes results/report/<model>/: report.nc, summary.md, the figures and index.html.
REPORT_ARGS ?=
.PHONY: report
report: all ## MODEL=DIR|FILE.bin|cache/models/<hash> [TEXT=FILE]: one model's outlier report in results/report/<model>/
	@test -n "$(MODEL)" || { echo "make report: MODEL=<Hugging Face directory | llama2.c .bin | cache/models/<hash>> is required (TEXT=FILE optional; docs/reference/report.md)"; exit 2; }
	bin/outlierlab report $(MODEL)$(if $(TEXT), --text=$(TEXT)) $(REPORT_ARGS)
