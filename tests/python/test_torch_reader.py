"""linmeta._torch_reader (python/src/torch_reader.cpp) reads what the attribute path reads.

Every input import of a plain torch.Tensor goes through the reader when it is usable; these
tests compare it with the five-attribute-call path on tensors of every kind an input can be
(views, strides, offsets, 0-d, empty, bool, Parameter) and check that anything else
(subclasses, floats, sparse) is left to the generic path. LINMETA_EXPECT_TORCH_READER=1
(scripts/python-test.sh, scripts/gpu-python.sh where torch's headers are there) makes a
build without the reader a failure instead of a skip.
"""

import os

import pytest

torch = pytest.importorskip("torch")
import linmeta  # noqa: E402
from linmeta import _linmeta  # noqa: E402


def _reader_on() -> bool:
    return _linmeta.torch_reader_status().startswith("on")


def test_the_reader_is_used_where_it_was_built():
    status = _linmeta.torch_reader_status()
    if os.environ.get("LINMETA_EXPECT_TORCH_READER") == "1":
        assert status == f"on: torch {torch.__version__}", status
    elif not status.startswith("on"):
        pytest.skip(status)


def _tensors(device):
    base = torch.arange(7 * 11, dtype=torch.int32, device=device).reshape(7, 11)
    yield base
    yield base[2:5]  # storage offset
    yield base[:, 3]  # strided 1-D
    yield base[1:, ::2]  # strided 2-D
    yield base.t()
    yield base[0, 0]  # 0-d
    yield base[:0]  # empty
    yield torch.arange(5, dtype=torch.int64, device=device)
    yield torch.tensor([True, False, True], device=device)
    for dt in (torch.uint8, torch.int8, torch.int16):
        yield torch.zeros(4, dtype=dt, device=device)
    yield torch.zeros((2, 3, 4), dtype=torch.int32, device=device)  # ndim 3
    yield torch.nn.Parameter(torch.zeros(3, dtype=torch.int32, device=device), requires_grad=False)


def _check_same(device):
    if not _reader_on():
        pytest.skip(_linmeta.torch_reader_status())
    for t in _tensors(device):
        assert _linmeta._import_info(t, True) == _linmeta._import_info(t, False), (t.shape, t.dtype)
        info = _linmeta._import_info(t, True)
        assert info[0] == t.data_ptr()


def test_the_reader_reads_what_the_attribute_path_reads():
    _check_same("cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_reader_reads_cuda_tensors():
    _check_same("cuda")
    info = _linmeta._import_info(torch.zeros(3, dtype=torch.int32, device="cuda"), True)
    assert info[5:] == (2, torch.cuda.current_device())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_reader_reads_torchs_current_stream():
    """linmeta.vllm's build() runs on torch's current stream, read by the reader's CUDA part."""
    if not _reader_on():
        pytest.skip(_linmeta.torch_reader_status())
    dev = torch.cuda.current_device()
    assert _linmeta._current_stream(dev) == torch.cuda.current_stream(dev).cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert _linmeta._current_stream(dev) == side.cuda_stream != 0
    assert _linmeta._current_stream(dev) == torch.cuda.current_stream(dev).cuda_stream


def test_no_current_stream_without_cuda_torch():
    if torch.cuda.is_available() or not _reader_on():
        pytest.skip("a CUDA torch, or no reader")
    assert _linmeta._current_stream(0) is None


class _Sub(torch.Tensor):
    pass


def test_anything_else_takes_the_generic_path():
    if not _reader_on():
        pytest.skip(_linmeta.torch_reader_status())
    sub = torch.arange(4, dtype=torch.int32).as_subclass(_Sub)
    floats = torch.zeros(3)
    for t in (sub, floats):
        assert _linmeta._import_info(t, True) == _linmeta._import_info(t, False)
    assert _linmeta._import_info(floats, True)[4] == "float32"  # named by the generic path
    # A sparse tensor: the generic path's TypeError, with or without the reader.
    sparse = torch.zeros(3, dtype=torch.int32).to_sparse()
    for reader in (True, False):
        with pytest.raises(TypeError, match="linmeta"):
            _linmeta._import_info(sparse, reader)
