# mk/experiments.mk — reproduce the papers' figures (docs/EXPERIMENTS.md).
#   make reproduce-<id>      one experiment, experiments/<id>.lua (PROFILE=quick|default|long|paper)
#   make reproduce-all       every experiment
#   make list                ids, titles and the profiles with results (results/<id>/<profile>/)
#   make list MARKDOWN=1     the experiments table of docs/EXPERIMENTS.md (checked by a test)
# Every target depends on `all`, so a fresh clone builds the engine first.
EXPERIMENT_IDS := $(sort $(basename $(notdir $(wildcard experiments/*.lua))))
REPRODUCE_ARGS ?=

.PHONY: list reproduce-all $(addprefix reproduce-,$(EXPERIMENT_IDS))

$(addprefix reproduce-,$(EXPERIMENT_IDS)): reproduce-%: all
	bin/outlierlab run experiments/$*.lua --profile=$(PROFILE) $(REPRODUCE_ARGS)

reproduce-all: all
	@for id in $(EXPERIMENT_IDS); do \
	  echo "== $$id ($(PROFILE))"; \
	  bin/outlierlab run experiments/$$id.lua --profile=$(PROFILE) $(REPRODUCE_ARGS) || exit 1; \
	done

list: all
	@bin/outlierlab list $(if $(MARKDOWN),--markdown)
