"""StarPU's file formats, one reader/writer each: history perf models, bus files, sampling directories; the LU codelet table."""
