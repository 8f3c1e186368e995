# Slurm batch jobs: make sbatch-<id> NODES=2 TASKS_PER_NODE=4 TIME=02:00:00 [PROFILE=paper]
#   [CPUS_PER_TASK=8] [LAUNCHER=srun|mpirun] [PARTITION=…] [ACCOUNT=…] [GRACE=300]
#   [MEM=16G | MEM_PER_CPU=4G]          memory per node / per CPU (Slurm's --mem, --mem-per-cpu)
#   [SETUP='module load openmpi/4.1']   the site's environment set-up: shell commands, or a file
#                                       to source (default: $OUTLIERLAB_SLURM_SETUP)
#   [EXTRA='--steps=3000 --retrain']    settings passed to the run
#   [ARRAY=n]                           a job array over the first n members of the sweep (n ≤ its
#                                       size, checked here), then a job that analyses and plots
#                                       after the array succeeded (--dependency=afterok)
#   [SUBMIT=false] [SBATCH_OUT=path]    only write the script (to path)
#   [LOG_DIR=dir]                       where Slurm writes the jobs' output (default results/<id>/<profile>)
# Scripts and logs: results/<id>/<profile>/; submit from the repository root (make does).
NODES          ?= 1
TASKS_PER_NODE ?= 1
CPUS_PER_TASK  ?= 1
TIME           ?= 01:00:00
LAUNCHER       ?= srun
GRACE          ?= 300
ARRAY          ?= 0
sbatch-%: all ## write an experiment's Slurm batch script; submit it when a cluster answers (NODES=, TIME=, …)
	bin/outlierlab run scripts/sbatch.lua --id=$* --profile=$(PROFILE) --nodes=$(NODES) \
	  --tasks_per_node=$(TASKS_PER_NODE) --cpus_per_task=$(CPUS_PER_TASK) --time=$(TIME) \
	  --launcher=$(LAUNCHER) --grace=$(GRACE) --array=$(ARRAY) \
	  $(if $(PARTITION),--partition=$(PARTITION)) $(if $(ACCOUNT),--account=$(ACCOUNT)) \
	  $(if $(MEM),--mem=$(MEM)) $(if $(MEM_PER_CPU),--mem_per_cpu=$(MEM_PER_CPU)) \
	  $(if $(SETUP),--setup='$(subst ','\'',$(SETUP))') $(if $(EXTRA),--extra='$(subst ','\'',$(EXTRA))') \
	  $(if $(SBATCH_OUT),--out=$(SBATCH_OUT)) $(if $(SUBMIT),--submit=$(SUBMIT)) $(if $(LOG_DIR),--log_dir=$(LOG_DIR))
