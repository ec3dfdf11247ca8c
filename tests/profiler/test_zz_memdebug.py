import gc
import tracemalloc

import zoo_stages
import sys

faults = sys.modules["profiler_faults"]


def test_debug(tmp_path):
    from hbir.profiler import diagnose
    from hbir.quantization import export

    qat, _ = zoo_stages.calibrated("multi_io", tmp_path)
    batch = faults.data("multi_io", 1)[0]
    qat_bc = export(qat, batch)
    diagnose(qat, faults.data("multi_io", 2), qat_bc=qat_bc)
    print("gc threshold", gc.get_threshold(), gc.get_count(), len(gc.get_objects()))
    for count in (2, 6):
        data = (faults.data("multi_io", 1, seed=i)[0] for i in range(count))
        tracemalloc.start(10)
        diagnose(qat, data, qat_bc=qat_bc)
        peak = tracemalloc.get_traced_memory()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        print(count, peak, "garbage collectable:", gc.collect())
        for s in snap.statistics("lineno")[:8]:
            print("   ", s)
