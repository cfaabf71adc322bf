//! `gradclient_native`: the Rust client of the gradient protocol (crate `gradclient`) as a
//! Python extension module. `gradclient.NativeClient` (client/python/gradclient/native.py) wraps
//! it with the pure-Python client's interface; use that, not this module directly.
//!
//! A call reduces a C-contiguous, writeable buffer of raw little-endian lanes in place (numpy's
//! `array.view(np.uint8)`: f32, f16, bf16 as their bytes) with the interpreter's lock released
//! during the network exchange, so a step's per-datagram work is Rust's.

mod errors;

use gradclient::{Client, Collective, Dtype, Endpoint, Op, Options};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One rank's client of one collective: a UDP socket bound to the member's address and
/// connected to the appliance.
#[pyclass(name = "Client", module = "gradclient_native")]
struct PyClient {
    inner: Client,
}

fn op_of(name: &str) -> PyResult<Op> {
    Op::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
        PyValueError::new_err(format!("op {name:?}: expected one of {}", names.join(", ")))
    })
}

fn dtype_of(name: &str) -> PyResult<Dtype> {
    Dtype::from_name(name).ok_or_else(|| {
        let names: Vec<_> = Dtype::ALL.iter().map(|d| d.name()).collect();
        PyValueError::new_err(format!("dtype {name:?}: expected one of {}", names.join(", ")))
    })
}

fn addr_of(ip: &str, port: u16) -> PyResult<SocketAddr> {
    let ip: IpAddr = ip.parse().map_err(|_| PyValueError::new_err(format!("{ip:?} is not an IP address")))?;
    Ok(SocketAddr::new(ip, port))
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| PyValueError::new_err(format!("{what} = {s} s is not a duration")))
}

#[pymethods]
impl PyClient {
    /// Binds `bind` = (ip, port) and connects to `appliance` = (ip, port). Times in seconds:
    /// `rto` the first retransmit timeout, `rto_min`/`rto_max` its bounds, `deadline` how long
    /// a call may go without progress. UDP segmentation offload is on unless the environment has
    /// `GRADCLIENT_GSO=0` ([`gradclient::gso_from_env`]), receive offload unless it has
    /// `GRADCLIENT_GRO=0` ([`gradclient::gro_from_env`]). Raises ValueError for a bad argument and the native
    /// error (`gradclient_native.NativeError`, kind "socket" or "invalid") when the socket
    /// cannot be set up or the collective is inconsistent.
    #[new]
    #[pyo3(signature = (collective_id, op, dtype, tensor_elements, chunk_elements, num_workers, rank,
                        bind, appliance, window=64, rto=0.02, rto_max=0.5, deadline=10.0,
                        start_round=0, rto_min=0.01, probe=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        collective_id: u16,
        op: &str,
        dtype: &str,
        tensor_elements: u64,
        chunk_elements: u32,
        num_workers: u16,
        rank: u16,
        bind: (String, u16),
        appliance: (String, u16),
        window: usize,
        rto: f64,
        rto_max: f64,
        deadline: f64,
        start_round: u32,
        rto_min: f64,
        probe: bool,
    ) -> PyResult<Self> {
        let c = Collective {
            collective_id,
            op: op_of(op)?,
            dtype: dtype_of(dtype)?,
            tensor_elements,
            chunk_elements,
            num_workers,
            rank,
        };
        let ep = Endpoint { bind: addr_of(&bind.0, bind.1)?, appliance: addr_of(&appliance.0, appliance.1)? };
        let opts = Options {
            window,
            initial_rto: seconds("rto", rto)?,
            min_rto: seconds("rto_min", rto_min)?,
            max_rto: seconds("rto_max", rto_max)?,
            deadline: seconds("deadline", deadline)?,
            start_round,
            probe,
            gso: gradclient::gso_from_env(),
            gro: gradclient::gro_from_env(),
            ..Options::default()
        };
        let inner = Client::new(c, ep, opts).map_err(errors::to_py)?;
        Ok(PyClient { inner })
    }

    /// Reduces `buf` in place as the tensor's elements `[offset, offset + len / lane size)`:
    /// `buf` is a writeable, C-contiguous buffer of bytes (numpy `array.view(np.uint8)`) holding
    /// little-endian lanes of the collective's dtype. `offset` (elements) is a multiple of
    /// `chunk_elements`; the range's last chunk is padded with zeros. The whole tensor is
    /// `offset = 0` with `tensor_elements` lanes. The interpreter's lock is released during the
    /// exchange (do not touch `buf` from another thread meanwhile).
    ///
    /// Raises ValueError for a read-only or non-contiguous buffer, and `NativeError` with the
    /// client's message for anything the client refuses or that fails on the network (NAK,
    /// timeout naming the ranks waited for, unreachable or refusing appliance).
    #[pyo3(signature = (buf, offset=0))]
    fn allreduce_range_bytes(&mut self, py: Python<'_>, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        let view = PyBuffer::<u8>::get(buf)?;
        if view.readonly() || !view.is_c_contiguous() {
            return Err(PyValueError::new_err("allreduce needs a writeable C-contiguous buffer"));
        }
        let (addr, len) = (view.buf_ptr() as usize, view.len_bytes());
        let client = &mut self.inner;
        let r = py.detach(move || {
            // SAFETY: `view` holds the exporter's buffer (writeable, contiguous, `len` bytes)
            // until it is dropped after this closure; the caller must not use the array from
            // another thread during the call (documented above).
            let data = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            client.allreduce_range_bytes(data, offset)
        });
        drop(view);
        r.map_err(errors::to_py)
    }

    /// Asks the appliance every chunk's round (PROBE and STATUS, spec section 7); the first
    /// call does it by itself. Raises `NativeError` (kind "unreachable", "nak", ...).
    fn sync(&mut self, py: Python<'_>) -> PyResult<()> {
        let client = &mut self.inner;
        py.detach(move || client.sync()).map_err(errors::to_py)
    }

    /// Per chunk: the round its next contribution carries.
    #[getter]
    fn rounds(&self) -> Vec<u32> {
        self.inner.rounds().to_vec()
    }

    /// The socket's local (ip, port).
    #[getter]
    fn local_addr(&self) -> (String, u16) {
        let a = self.inner.local_addr();
        (a.ip().to_string(), a.port())
    }

    /// The counters, as the pure-Python client's `stats` (`chunks`, `sent`, `retransmits`,
    /// `results`, `stale_results`, `naks`, `rejoins`, `probes`, `statuses`, `ignored`,
    /// `seconds` of the last call) plus the system calls: `datagrams` (every datagram sent),
    /// `send_calls` and `recv_calls` (a batched call moves several), `gso_sends` (messages
    /// that carried several datagrams with UDP segmentation offload) and `gro_recvs` (messages
    /// received that carried several, coalesced by the receiving device).
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("chunks", s.chunks)?;
        d.set_item("sent", s.sent)?;
        d.set_item("retransmits", s.retransmits)?;
        d.set_item("results", s.results)?;
        d.set_item("stale_results", s.stale_results)?;
        d.set_item("naks", s.naks)?;
        d.set_item("rejoins", s.rejoins)?;
        d.set_item("probes", s.probes)?;
        d.set_item("statuses", s.statuses)?;
        d.set_item("ignored", s.ignored)?;
        d.set_item("datagrams", s.sent + s.probes)?;
        d.set_item("send_calls", s.send_calls)?;
        d.set_item("gso_sends", s.gso_sends)?;
        d.set_item("gro_recvs", s.gro_recvs)?;
        d.set_item("recv_calls", s.recv_calls)?;
        d.set_item("seconds", s.seconds)?;
        Ok(d)
    }
}

/// The wire's constants as the Rust code defines them (spec sections 2, 5 and 7), so that the
/// pure-Python client's own copies (gradclient/wire.py) can be checked against them: a dict of
/// `header_len`, `version`, `default_udp_port`, `rank_none`, `flags` {name: bit}, `ops`
/// {name: code}, `dtypes` {name: (code, bytes per lane)}, `nak_reasons` {code: text} and
/// `states` {name: code} (a STATUS's reason byte).
#[pyfunction]
fn wire_constants(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use dataplane::wire::gradient::{self as g, Flags, NakReason, SlotState};
    let d = PyDict::new(py);
    d.set_item("header_len", g::HEADER_LEN)?;
    d.set_item("version", g::VERSION)?;
    d.set_item("default_udp_port", g::DEFAULT_UDP_PORT)?;
    d.set_item("rank_none", g::RANK_NONE)?;
    let flags = PyDict::new(py);
    for (k, v) in
        [("result", Flags::RESULT), ("retransmit", Flags::RETRANSMIT), ("nak", Flags::NAK), ("probe", Flags::PROBE)]
    {
        flags.set_item(k, v)?;
    }
    d.set_item("flags", flags)?;
    let ops = PyDict::new(py);
    for o in Op::ALL {
        ops.set_item(o.name(), o.wire())?;
    }
    d.set_item("ops", ops)?;
    let dtypes = PyDict::new(py);
    for t in Dtype::ALL {
        dtypes.set_item(t.name(), (t.wire(), t.size()))?;
    }
    d.set_item("dtypes", dtypes)?;
    let naks = PyDict::new(py);
    for c in NakReason::UNKNOWN_COLLECTIVE..=NakReason::STALE_ROUND {
        naks.set_item(c, gradclient::nak_reason_text(c))?;
    }
    d.set_item("nak_reasons", naks)?;
    let states = PyDict::new(py);
    for (k, v) in [
        ("no_history", SlotState::NO_HISTORY),
        ("in_progress_without_rank", SlotState::IN_PROGRESS_WITHOUT_RANK),
        ("in_progress_with_rank", SlotState::IN_PROGRESS_WITH_RANK),
        ("completed", SlotState::COMPLETED),
    ] {
        states.set_item(k, v)?;
    }
    d.set_item("states", states)?;
    Ok(d)
}

#[pymodule]
fn gradclient_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyClient>()?;
    m.add_function(wrap_pyfunction!(wire_constants, m)?)?;
    m.add("NativeError", m.py().get_type::<errors::NativeError>())?;
    Ok(())
}
