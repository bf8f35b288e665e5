//! TPC-C, C-Twitter, C-RUBiS and BlindW workloads. Not implemented yet: see the workloads issue.
