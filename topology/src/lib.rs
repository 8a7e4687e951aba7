//! flowmesh topology: cluster model, allocators, pipeline, FlowSet diff, simulator.
