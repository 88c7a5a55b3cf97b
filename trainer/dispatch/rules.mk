# The token dispatcher: one interface (dispatch.h) and its implementations.
# The single-rank one links into libmoe_model.a (a model runs alone with it),
# the expert-parallel one, over a communicator, into libmoe_parallel.a.
DISPATCH_LOCAL_SRCS := trainer/dispatch/dispatch_local.c
DISPATCH_EP_SRCS := trainer/dispatch/dispatch_ep.c
