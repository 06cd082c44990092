import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny matrices: multi-threaded BLAS/LAPACK only spins on a shared 2-core machine (100x slower logdet)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
