# mk/views.mk — the interactive views' charting library and browser test dependencies
# (docs/reference/views.md; lua/outlierlab/figure/views.lua).
#   make views-assets   Apache ECharts (pinned npm package echarts, Apache-2.0), fetched with npm,
#                       its tarball checked against the registry's sha512 and the files kept
#                       checked against the sha256 sums below: build/npm/echarts-6.1.0/package/
#                       {dist/echarts.min.js,LICENSE,NOTICE,licenses/LICENSE-d3}. Runs after make
#                       deps, as part of make (all) and so of make test.
#                       make gallery and make report copy them into results/_assets/, so that a
#                       page loads nothing from outside the results folder. Without them the pages
#                       fall back to plain canvas heat maps and say how to install the library.
# The browser test (tests/lua/test_views_browser.lua) drives Debian's chromium from node (Debian's
# nodejs) through Chromium's DevTools protocol on a pipe: no npm package is needed for it.
ECHARTS_VERSION := 6.1.0
ECHARTS_DIR     := build/npm/echarts-$(ECHARTS_VERSION)
# the tarball's sha512 as the npm registry publishes it (npm view echarts@6.1.0 dist.integrity)
ECHARTS_SHA512  := ab4c9a14f8200bd15476c587e1b95abd15859b176b22875b92828d02326e74023a080f6034fc47b55d917193447a9655964e32bc16243a46e4e87215a48c8764
ECHARTS_SUM     := b66b25aeb4df84e33199dc21694014d336d222cbd9deb0e5a7c14bd6aa0d0fd0  dist/echarts.min.js\n634293835b43a6dd2094fa39182a3d9a6b9ca43b7fdb9ac354e8037af2a3093a  LICENSE\nd491d358344f842685c1b1585970999db65fe30ecf7ef3867af8814f4016c016  NOTICE\ne1211892da0b0e0585b7aebe8f98c1274fba15bafe47fa1f4ee8a7a502c06304  licenses/LICENSE-d3\n
# npm only where there is none: a node from another repository (NodeSource's nodejs) brings its
# own npm and conflicts with Debian's
# (test packages only: without npm a run draws the views with the plain fallback)
TEST_DEB_PKGS   += nodejs chromium $(if $(shell command -v npm 2>/dev/null),,npm)

# after make deps (which installs npm on a fresh machine), before the build and the tests
.PHONY: views-assets views-assets-test
all: views-assets
views-assets: deps
# the tests: again after test-deps-apt has installed npm (a fresh machine has none before)
test-deps: views-assets-test
views-assets-test: test-deps-apt ## views-assets again after test-deps-apt (npm on a fresh machine)
	@$(MAKE) --no-print-directory views-assets
views-assets: ## Apache ECharts for the interactive views (pinned npm package, checksummed)
	@check() { (cd $(ECHARTS_DIR)/package 2>/dev/null && printf '$(ECHARTS_SUM)' | sha256sum -c --status 2>/dev/null); }; \
	if ! check; then \
	  if command -v npm >/dev/null 2>&1; then \
	    echo "make deps: fetching echarts@$(ECHARTS_VERSION) with npm (the interactive views' charting library)"; \
	    rm -rf $(ECHARTS_DIR) && mkdir -p $(ECHARTS_DIR) && \
	    (cd $(ECHARTS_DIR) && npm pack --silent echarts@$(ECHARTS_VERSION) >/dev/null 2>&1) || \
	      echo "make deps: npm could not fetch echarts@$(ECHARTS_VERSION); the views fall back to plain heat maps"; \
	    if [ -f $(ECHARTS_DIR)/echarts-$(ECHARTS_VERSION).tgz ]; then \
	      echo "$(ECHARTS_SHA512)  $(ECHARTS_DIR)/echarts-$(ECHARTS_VERSION).tgz" | sha512sum -c --status || \
	        { echo "make deps: $(ECHARTS_DIR)/echarts-$(ECHARTS_VERSION).tgz does not match the pinned sha512"; rm -rf $(ECHARTS_DIR); exit 1; }; \
	      (cd $(ECHARTS_DIR) && tar xzf echarts-$(ECHARTS_VERSION).tgz package/dist/echarts.min.js package/LICENSE \
	         package/NOTICE package/licenses/LICENSE-d3 && rm -f echarts-$(ECHARTS_VERSION).tgz); \
	      check || { echo "make deps: $(ECHARTS_DIR) does not match the pinned checksums"; rm -rf $(ECHARTS_DIR); exit 1; }; \
	    fi; \
	  else \
	    echo "make deps: npm not found; the views fall back to plain heat maps (install npm, then make deps)"; \
	  fi; \
	fi
