# mk/experiments.mk — reproduce the papers' figures (docs/EXPERIMENTS.md).
#   make reproduce-<id>      one experiment, experiments/<id>.lua (PROFILE=quick|default|long|paper)
#   make reproduce-all       every experiment
#   make list                ids, titles and the profiles with results (results/<id>/<profile>/)
#   make list MARKDOWN=1     the experiments table of docs/EXPERIMENTS.md (checked by a test)
#   make reproduce-<id> MODEL=DIR TEXT=FILE   an analysis experiment on an imported Hugging Face
#                            model (--model=DIR --text=FILE, docs/PRETRAINED.md), e.g.
#                            make reproduce-quant MODEL=models/Llama-2-7b-hf TEXT=data/wiki.txt
#                            (results/<id>/<model name>-<profile>/)
# Every target depends on `all`, so a fresh clone builds the engine first.
EXPERIMENT_IDS := $(sort $(basename $(notdir $(wildcard experiments/*.lua))))
REPRODUCE_ARGS ?=

.PHONY: list reproduce-all $(addprefix reproduce-,$(EXPERIMENT_IDS))

$(addprefix reproduce-,$(EXPERIMENT_IDS)): reproduce-%: all
	bin/outlierlab run experiments/$*.lua --profile=$(PROFILE)$(if $(MODEL), --model=$(MODEL))$(if $(TEXT), --text=$(TEXT)) $(REPRODUCE_ARGS)

reproduce-all: all
	@for id in $(EXPERIMENT_IDS); do \
	  echo "== $$id ($(PROFILE))"; \
	  bin/outlierlab run experiments/$$id.lua --profile=$(PROFILE) $(REPRODUCE_ARGS) || exit 1; \
	done

list: all
	@bin/outlierlab list $(if $(MARKDOWN),--markdown)
