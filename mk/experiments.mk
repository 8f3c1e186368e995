# mk/experiments.mk — reproduce the papers' figures (docs/reference/experiments.md).
#   make reproduce-<id>      one experiment, experiments/<id>.lua (PROFILE=quick|default|long|paper)
#   make reproduce-all       every experiment (RANKS=2: under mpirun, the same numbers)
#   make list                ids, titles and the profiles with results (results/<id>/<profile>/)
#   make list MARKDOWN=1     the experiments table of docs/reference/experiments.md (checked by a test)
#   make reproduce-<id> MODEL=DIR TEXT=FILE   an analysis experiment on an imported Hugging Face
#                            model (--model=DIR --text=FILE, docs/reference/pretrained.md), e.g.
#                            make reproduce-quant MODEL=models/Llama-2-7b-hf TEXT=data/wiki.txt
#                            (results/<id>/<model name>-<profile>/)
# Every target depends on `all`, so a fresh clone builds the engine first.
EXPERIMENT_IDS := $(sort $(basename $(notdir $(wildcard experiments/*.lua))))
REPRODUCE_ARGS ?=
# RANKS=N: run each experiment under mpirun with N ranks of nproc/N threads, every model on one
# rank (--model_ranks=1: a sweep's members spread over the ranks, a lone model on rank 0), so the
# numbers are the single-process ones bit for bit (docs/reference/training.md)
RANKS ?= 1
RUN_PREFIX = $(if $(filter-out 1,$(RANKS)),mpirun -np $(RANKS) --bind-to none -x OMP_NUM_THREADS=$$(( $$(nproc) / $(RANKS) > 0 ? $$(nproc) / $(RANKS) : 1 )) -x OUTLIERLAB_MODEL_RANKS=1 ,)

.PHONY: list reproduce-all $(addprefix reproduce-,$(EXPERIMENT_IDS))

$(addprefix reproduce-,$(EXPERIMENT_IDS)): reproduce-%: all ## reproduce-<id>: one experiment (PROFILE=quick|default|long|paper, MODEL=, TEXT=)
	$(RUN_PREFIX)bin/outlierlab run experiments/$*.lua --profile=$(PROFILE)$(if $(MODEL), --model=$(MODEL))$(if $(TEXT), --text=$(TEXT)) $(REPRODUCE_ARGS)

# any other reproduce-<word>: no such experiment; the runner says so and names the nearest
# ids (make reproduce-so-fg3: "did you mean so-fig3?")
reproduce-%: all
	@bin/outlierlab run experiments/$*.lua --profile=$(PROFILE)

# each experiment's wall time and the total are printed as they end (a rerun reuses the cache:
# its times are what was left to do)
reproduce-all: all ## every experiment, one after the other (RANKS=2: under mpirun), each one timed
	@t0=$$(date +%s); for id in $(EXPERIMENT_IDS); do \
	  echo "== $$id ($(PROFILE))"; t=$$(date +%s); \
	  $(RUN_PREFIX)bin/outlierlab run experiments/$$id.lua --profile=$(PROFILE) $(REPRODUCE_ARGS) || exit 1; \
	  echo "== $$id: $$(( $$(date +%s) - t )) s"; \
	done; echo "== reproduce-all ($(PROFILE)): $(words $(EXPERIMENT_IDS)) experiments in $$(( $$(date +%s) - t0 )) s"

list: all ## the experiments' ids, titles and the profiles with results (MARKDOWN=1: the docs' table)
	@bin/outlierlab list $(if $(MARKDOWN),--markdown)
