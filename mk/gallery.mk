# mk/gallery.mk — looking at results (docs/reference/experiments.md, "Results gallery" and "Training histories").
#   make gallery             results/index.html and results/index.md: every run's figure, claim,
#                            verdict, profile, run time, NetCDF file and summary (from run.json)
#   make gallery-check       the same, then headless Chromium (Debian package chromium, in
#                            TEST_DEB_PKGS: it is large) loads the page, fails on a broken image
#                            and saves a screenshot to results/gallery.png
#   make history MODEL=cache/models/<hash>   the model's training curves: history.nc and history.png
RESULTS ?= $(or $(OUTLIERLAB_RESULTS),results)
.PHONY: gallery gallery-check history

gallery: all ## results/index.html and index.md: every run's figure, claim and verdict
	bin/outlierlab gallery --results=$(RESULTS)

gallery-check: all ## the gallery, then headless Chromium loads it and fails on a broken image
	@command -v chromium >/dev/null || { echo "make gallery-check: needs Debian's chromium (make test-deps, or apt-get install --no-install-recommends chromium)"; exit 1; }
	bin/outlierlab gallery --results=$(RESULTS) --check=$(RESULTS)/gallery.png

history: all ## MODEL=cache/models/<hash>: that model's training curves (history.nc, history.png)
	@test -n "$(MODEL)" || { echo "make history: MODEL=cache/models/<hash> is required (a run's models: results/<id>/<profile>/run.json)"; exit 2; }
	bin/outlierlab history $(MODEL)
