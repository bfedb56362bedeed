"""The compiled decision both jobs run: the input frame (frame, rows, rule_codes, arrays), the pass (cluster_pass:
renumbering, the kernel's loop in kernel with its steps and arithmetic, numba_cache), the record (record_batch,
stop_column, record_json) and the carried state's format (state_codec). Held equal to core/reference/."""
