# Slurm batch jobs: make sbatch-<id> NODES=2 TASKS_PER_NODE=4 TIME=02:00:00 [PROFILE=paper]
#   [CPUS_PER_TASK=8] [LAUNCHER=srun|mpirun] [PARTITION=…] [ACCOUNT=…] [ARRAY=n] [GRACE=300]
NODES          ?= 1
TASKS_PER_NODE ?= 1
CPUS_PER_TASK  ?= 1
TIME           ?= 01:00:00
LAUNCHER       ?= srun
GRACE          ?= 300
ARRAY          ?= 0
sbatch-%: all
	bin/outlierlab run scripts/sbatch.lua --id=$* --profile=$(PROFILE) --nodes=$(NODES) \
	  --tasks_per_node=$(TASKS_PER_NODE) --cpus_per_task=$(CPUS_PER_TASK) --time=$(TIME) \
	  --launcher=$(LAUNCHER) --grace=$(GRACE) --array=$(ARRAY) \
	  $(if $(PARTITION),--partition=$(PARTITION)) $(if $(ACCOUNT),--account=$(ACCOUNT))
