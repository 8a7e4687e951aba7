//! Shared code of flowmesh-shim and flowmesh-cni.
