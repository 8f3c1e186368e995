# mk/gallery.mk — looking at results (docs/reference/experiments.md, "Results gallery" and "Training histories").
#   make gallery             results/index.html and results/index.md: every run's figure, claim,
#                            verdict, profile, run time, NetCDF file and summary (from run.json),
#                            and results/<id>/<profile>/views.html for the runs with views records
#                            (docs/reference/views.md; the charting library into results/_assets)
#   make gallery-check       the same, then headless Chromium loads the page, fails on a broken
#                            image, saves a screenshot to results/gallery.png, and loads every
#                            views page (scripts/browser.js, node): fails on a console error
#   make history MODEL=cache/models/<hash>   the model's training curves: history.nc and history.png
RESULTS ?= $(or $(OUTLIERLAB_RESULTS),results)
.PHONY: gallery gallery-check history

gallery: all ## results/index.html and index.md: every run's figure, claim and verdict
	bin/outlierlab gallery --results=$(RESULTS)

gallery-check: all ## the gallery, then headless Chromium loads it and every views page; fails on a broken image or a console error
	@command -v chromium >/dev/null && command -v node >/dev/null || { echo "make gallery-check: needs Debian's chromium and nodejs (make test-deps)"; exit 1; }
	bin/outlierlab gallery --results=$(RESULTS) --check=$(RESULTS)/gallery.png

history: all ## MODEL=cache/models/<hash>: that model's training curves (history.nc, history.png)
	@test -n "$(MODEL)" || { echo "make history: MODEL=cache/models/<hash> is required (a run's models: results/<id>/<profile>/run.json)"; exit 2; }
	bin/outlierlab history $(MODEL)
