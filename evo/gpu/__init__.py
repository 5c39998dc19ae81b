"""Everything that touches the GPU. Imported only inside the GPU worker process
(evo.gpu.worker starts it), so the search process itself never holds a CUDA context."""
