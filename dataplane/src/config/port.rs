//! The keys every program's `[[port]]` table takes (the appliance's and the traffic generator's):
//! the device (`name`, `vdev`, `pci`) and its queues' descriptors (`rx_desc`, `tx_desc`), declared
//! once by [`port_config!`](crate::port_config) with each program's own keys around them.
//!
//! A macro rather than a shared struct: both tables refuse unknown keys
//! (`deny_unknown_fields`), which serde cannot combine with a flattened struct.

/// Default Rx and Tx descriptors per queue of a port.
pub const DEFAULT_DESC: u16 = 1024;

/// [`DEFAULT_DESC`] as a function: serde's default of `rx_desc` and `tx_desc` (serde takes a
/// function's path).
pub fn default_desc() -> u16 {
    DEFAULT_DESC
}

/// The EAL device name of a port given as a vdev string (`--vdev`) or a PCI address (`-a`): the
/// vdev string up to its first comma, else the PCI address, trimmed; empty when neither is given.
/// The vdev wins when both are.
pub fn device_name<'a>(vdev: Option<&'a str>, pci: Option<&'a str>) -> &'a str {
    match (vdev, pci) {
        (Some(v), _) => v.split(',').next().unwrap_or(v).trim(),
        (None, Some(p)) => p.trim(),
        (None, None) => "",
    }
}

/// Declares a program's `[[port]]` table: a struct with the keys every program's ports take and
/// the program's own, deserialized strictly (an unknown key is an error, serde's "unknown field"
/// listing the keys in order), and its `device_name()` ([`device_name`](crate::config::device_name)
/// of its `vdev` and `pci`).
///
/// The shared keys are named, in their places, without types or docs (they are declared here);
/// the program's own fields are written in full, with their docs and serde attributes, between
/// `pci` and `rx_desc` or after `tx_desc`. The keys come in that order: `name`, `vdev`, `pci`, the
/// first group, `rx_desc`, `tx_desc`, the second group.
///
/// The shared keys: `name` (a label, `Option<String>`), `vdev` and `pci` (the device, as EAL's
/// `--vdev` and `-a` take it, `Option<String>`), `rx_desc` and `tx_desc` (descriptors per queue,
/// `u16`, default [`DEFAULT_DESC`](crate::config::DEFAULT_DESC)).
///
/// The struct derives `Debug`, `Clone` and serde's `Deserialize`: the calling crate depends on
/// `serde` (with `derive`) and on this crate under the name `dataplane`.
///
/// ```
/// dataplane::port_config! {
///     /// `[[port]]` of a program with a queue count of its own.
///     pub struct PortConfig {
///         name, vdev, pci,
///         /// Rx queues.
///         #[serde(default)]
///         pub rx_queues: u16,
///         rx_desc, tx_desc,
///     }
/// }
///
/// let p: PortConfig = toml::from_str("vdev = \"net_null0,size=64\"\nrx_queues = 2").unwrap();
/// assert_eq!((p.device_name(), p.rx_queues, p.rx_desc), ("net_null0", 2, 1024));
/// assert!(toml::from_str::<PortConfig>("vdev = \"net_null0\"\nmtu = 9000").is_err());
/// ```
#[macro_export]
macro_rules! port_config {
    (
        $(#[$meta:meta])*
        pub struct $Port:ident {
            name, vdev, pci,
            $( $(#[$mid_meta:meta])* pub $mid:ident : $mid_ty:ty, )*
            rx_desc, tx_desc,
            $( $(#[$tail_meta:meta])* pub $tail:ident : $tail_ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, ::serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $Port {
            /// A label (default `port<i>`), for stats and reports.
            pub name: Option<String>,
            /// A vdev string as for EAL's `--vdev`, like `net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap`.
            pub vdev: Option<String>,
            /// A PCI address as for EAL's `-a`, like `0000:3b:00.0` (the device bound to vfio-pci).
            pub pci: Option<String>,
            $( $(#[$mid_meta])* pub $mid: $mid_ty, )*
            /// Rx descriptors per queue.
            #[serde(default = "::dataplane::config::default_desc")]
            pub rx_desc: u16,
            /// Tx descriptors per queue.
            #[serde(default = "::dataplane::config::default_desc")]
            pub tx_desc: u16,
            $( $(#[$tail_meta])* pub $tail: $tail_ty, )*
        }

        impl $Port {
            /// The EAL device name: the vdev string up to its first comma, or the PCI address.
            pub fn device_name(&self) -> &str {
                $crate::config::device_name(self.vdev.as_deref(), self.pci.as_deref())
            }
        }
    };
}
