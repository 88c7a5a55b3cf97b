# launch/: the launch decision core below plugin/ and topo/: the admin policy,
# the request, step and verdict types and the verdict, plain C with no Slurm
# and no hwloc. The SPANK plugin and moe-topo --check both link it.
LAUNCH_SRCS := launch/policy.c launch/verdict.c
LAUNCH_LIB := $(B)/lib/libmoe_launch.a
$(LAUNCH_LIB): $(call obj,$(LAUNCH_SRCS))
ALL_LIBS += $(LAUNCH_LIB)

