//! Where audit lines go: always the node's log file (rotated at `maxFileSize`, keeping
//! `maxLogFiles` old ones), and the configured `destination` besides it: `libc` (the node's
//! syslog socket, as glibc's `syslog()` writes it), `udp:HOST:PORT` and `unix:PATH` (RFC 5424
//! syslog messages, as Open vSwitch's own syslog methods send them), or `null`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The additional destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `null`.
    Null,
    /// `libc`: the syslog socket (`/dev/log` unless the shim was told another).
    Libc,
    /// `udp:HOST:PORT`.
    Udp(SocketAddr),
    /// `unix:PATH`.
    Unix(PathBuf),
}

impl std::str::FromStr for Destination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "null" | "" => Ok(Destination::Null),
            "libc" => Ok(Destination::Libc),
            _ => {
                if let Some(a) = s.strip_prefix("udp:") {
                    a.parse()
                        .map(Destination::Udp)
                        .map_err(|_| format!("destination {s:?}: udp:IP:PORT"))
                } else if let Some(p) = s.strip_prefix("unix:").filter(|p| p.starts_with('/')) {
                    Ok(Destination::Unix(PathBuf::from(p)))
                } else {
                    Err(format!(
                        "destination {s:?}: must be libc, null, udp:HOST:PORT or unix:PATH"
                    ))
                }
            }
        }
    }
}

/// How the sinks are set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkSettings {
    /// The log file.
    pub file: PathBuf,
    /// Rotate at this many bytes.
    pub max_file_bytes: u64,
    /// Rotated files kept.
    pub max_log_files: u32,
    /// The additional destination.
    pub destination: Destination,
    /// Syslog facility code (16 = local0).
    pub facility: u8,
    /// The syslog socket of `libc`.
    pub syslog_socket: PathBuf,
    /// Host name in RFC 5424 messages.
    pub hostname: String,
}

/// The open sinks.
pub struct Sinks {
    settings: SinkSettings,
    file: Option<(File, u64)>,
    udp: Option<UdpSocket>,
    unix: Option<UnixDatagram>,
    /// Write errors so far (each reported once per kind in a row).
    pub errors: u64,
    last_error: Option<String>,
}

impl Sinks {
    /// Sinks with `settings` (files and sockets are opened on first use).
    pub fn new(settings: SinkSettings) -> Self {
        Sinks {
            settings,
            file: None,
            udp: None,
            unix: None,
            errors: 0,
            last_error: None,
        }
    }

    /// New settings: what changed is reopened.
    pub fn reconfigure(&mut self, settings: SinkSettings) {
        if settings.file != self.settings.file {
            self.file = None;
        }
        if settings.destination != self.settings.destination {
            self.udp = None;
            self.unix = None;
        }
        self.settings = settings;
    }

    /// The settings in use.
    pub fn settings(&self) -> &SinkSettings {
        &self.settings
    }

    /// Write one line (no newline) with syslog severity `severity` everywhere it goes; errors
    /// are counted and logged, never fatal.
    pub fn write(&mut self, line: &str, severity: u8, time: SystemTime) {
        if let Err(e) = self.write_file(line) {
            self.failed(format!(
                "audit log file {}: {e}",
                self.settings.file.display()
            ));
        }
        let r = match self.settings.destination.clone() {
            Destination::Null => Ok(()),
            Destination::Libc => self.send_libc(line, severity, time),
            Destination::Udp(a) => self.send_udp(a, line, severity, time),
            Destination::Unix(p) => self.send_unix(&p, line, severity, time),
        };
        if let Err(e) = r {
            let d = match &self.settings.destination {
                Destination::Null => "null".to_string(),
                Destination::Libc => format!("libc ({})", self.settings.syslog_socket.display()),
                Destination::Udp(a) => format!("udp:{a}"),
                Destination::Unix(p) => format!("unix:{}", p.display()),
            };
            self.failed(format!("audit destination {d}: {e}"));
        }
    }

    fn failed(&mut self, msg: String) {
        self.errors += 1;
        if self.last_error.as_deref() != Some(msg.as_str()) {
            tracing::warn!(error = %msg, "writing an audit line failed (counted; the next line is tried again)");
            self.last_error = Some(msg);
        }
    }

    fn write_file(&mut self, line: &str) -> std::io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.file.is_none() {
            if let Some(dir) = self.settings.file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.settings.file)?;
            let size = f.metadata()?.len();
            self.file = Some((f, size));
        }
        if self
            .file
            .as_ref()
            .is_some_and(|(_, size)| *size > 0 && size + len > self.settings.max_file_bytes)
        {
            self.file = None;
            rotate(&self.settings.file, self.settings.max_log_files)?;
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.settings.file)?;
            self.file = Some((f, 0));
        }
        if let Some((f, size)) = self.file.as_mut() {
            let mut buf = Vec::with_capacity(line.len() + 1);
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
            f.write_all(&buf)?;
            *size += len;
        }
        Ok(())
    }

    fn pri(&self, severity: u8) -> u8 {
        self.settings
            .facility
            .saturating_mul(8)
            .saturating_add(severity)
    }

    /// RFC 5424: `<PRI>1 TIMESTAMP HOST flowmesh-shim PID audit - MSG`.
    fn rfc5424(&self, line: &str, severity: u8, time: SystemTime) -> Vec<u8> {
        format!(
            "<{}>1 {} {} flowmesh-shim {} audit - {line}",
            self.pri(severity),
            super::event::rfc3339(time),
            self.settings.hostname,
            std::process::id()
        )
        .into_bytes()
    }

    fn send_udp(
        &mut self,
        to: SocketAddr,
        line: &str,
        severity: u8,
        time: SystemTime,
    ) -> std::io::Result<()> {
        if self.udp.is_none() {
            let bind: SocketAddr = if to.is_ipv4() {
                "0.0.0.0:0".parse().map_err(std::io::Error::other)?
            } else {
                "[::]:0".parse().map_err(std::io::Error::other)?
            };
            self.udp = Some(UdpSocket::bind(bind)?);
        }
        let msg = self.rfc5424(line, severity, time);
        match &self.udp {
            Some(s) => s.send_to(&msg, to).map(|_| ()),
            None => Ok(()),
        }
    }

    fn send_unix(
        &mut self,
        path: &Path,
        line: &str,
        severity: u8,
        time: SystemTime,
    ) -> std::io::Result<()> {
        let msg = self.rfc5424(line, severity, time);
        self.send_datagram(path, &msg)
    }

    /// As glibc's `syslog()` writes to `/dev/log`: `<PRI>Mmm dd hh:mm:ss flowmesh-shim[PID]: MSG`.
    fn send_libc(&mut self, line: &str, severity: u8, time: SystemTime) -> std::io::Result<()> {
        let ts = bsd_time(time);
        let msg = format!(
            "<{}>{ts} flowmesh-shim[{}]: {line}",
            self.pri(severity),
            std::process::id()
        );
        let path = self.settings.syslog_socket.clone();
        self.send_datagram(&path, msg.as_bytes())
    }

    fn send_datagram(&mut self, path: &Path, msg: &[u8]) -> std::io::Result<()> {
        if self.unix.is_none() {
            self.unix = Some(UnixDatagram::unbound()?);
        }
        let r = match &self.unix {
            Some(s) => s.send_to(msg, path).map(|_| ()),
            None => Ok(()),
        };
        if r.is_err() {
            // A restarted syslog daemon has a new socket at the same path: try a fresh one next.
            self.unix = None;
        }
        r
    }
}

/// `Mmm dd hh:mm:ss` (RFC 3164, UTC).
fn bsd_time(time: SystemTime) -> String {
    let full = super::event::rfc3339(time); // YYYY-MM-DDThh:mm:ss.mmmZ
    let month: usize = full.get(5..7).and_then(|m| m.parse().ok()).unwrap_or(1);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let day: u32 = full.get(8..10).and_then(|d| d.parse().ok()).unwrap_or(1);
    format!(
        "{} {day:>2} {}",
        MONTHS
            .get(month.saturating_sub(1))
            .copied()
            .unwrap_or("Jan"),
        full.get(11..19).unwrap_or("00:00:00")
    )
}

/// `file` becomes `file.1`, `file.1` becomes `file.2`, ... up to `keep` (the oldest dropped).
fn rotate(file: &Path, keep: u32) -> std::io::Result<()> {
    let name = |i: u32| {
        let mut p = file.as_os_str().to_owned();
        p.push(format!(".{i}"));
        PathBuf::from(p)
    };
    let _ = std::fs::remove_file(name(keep));
    for i in (1..keep).rev() {
        let from = name(i);
        if from.exists() {
            std::fs::rename(&from, name(i + 1))?;
        }
    }
    if keep == 0 {
        return std::fs::remove_file(file);
    }
    std::fs::rename(file, name(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn settings(dir: &Path, destination: Destination) -> SinkSettings {
        SinkSettings {
            file: dir.join("log/acl-audit-log.log"),
            max_file_bytes: 100,
            max_log_files: 2,
            destination,
            facility: 16,
            syslog_socket: dir.join("dev-log"),
            hostname: "node-1".into(),
        }
    }

    fn t() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_764_203_131)
    }

    #[test]
    fn the_file_rotates_at_its_size_and_keeps_the_newest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = Sinks::new(settings(dir.path(), Destination::Null));
        for i in 0..12 {
            s.write(&format!("line {i:02} {}", "x".repeat(30)), 5, t());
        }
        assert_eq!(s.errors, 0);
        let f = dir.path().join("log/acl-audit-log.log");
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        let current = read(f.clone());
        assert!(current.len() <= 100, "{current}");
        assert!(current.contains("line 11"));
        let one = read(PathBuf::from(format!("{}.1", f.display())));
        let two = read(PathBuf::from(format!("{}.2", f.display())));
        assert!(one.contains("line 09") || one.contains("line 08"), "{one}");
        assert!(!two.is_empty());
        assert!(!PathBuf::from(format!("{}.3", f.display())).exists());
        // Nothing is lost inside what is kept: lines are whole and in order.
        let all: Vec<String> = [two, one, current]
            .concat()
            .lines()
            .map(|l| l[..7].to_string())
            .collect();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
    }

    #[test]
    fn syslog_destinations_get_a_syslog_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dev_log = UnixDatagram::bind(dir.path().join("dev-log")).expect("bind");
        let mut s = Sinks::new(settings(dir.path(), Destination::Libc));
        s.write("the line", 1, t());
        let mut buf = [0u8; 512];
        let n = dev_log.recv(&mut buf).expect("libc datagram");
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(
            msg.starts_with("<129>Nov 27 00:25:31 flowmesh-shim[") && msg.ends_with("]: the line"),
            "{msg}"
        );

        let sock = dir.path().join("audit.sock");
        let unix = UnixDatagram::bind(&sock).expect("bind");
        s.reconfigure(settings(dir.path(), Destination::Unix(sock)));
        s.write("the line", 5, t());
        let n = unix.recv(&mut buf).expect("unix datagram");
        let msg = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(
            msg.starts_with("<133>1 2025-11-27T00:25:31.000Z node-1 flowmesh-shim ")
                && msg.ends_with(" audit - the line"),
            "{msg}"
        );

        let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
        let to = udp.local_addr().expect("addr");
        s.reconfigure(settings(dir.path(), Destination::Udp(to)));
        s.write("the line", 4, t());
        let n = udp.recv(&mut buf).expect("udp datagram");
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("<132>1 "));
        assert_eq!(s.errors, 0);

        // A destination nobody listens on: counted, the file still written.
        s.reconfigure(settings(
            dir.path(),
            Destination::Unix(dir.path().join("nobody")),
        ));
        s.write("after", 5, t());
        assert_eq!(s.errors, 1);
        let f = std::fs::read_to_string(dir.path().join("log/acl-audit-log.log")).expect("file");
        assert!(f.ends_with("after\n"));
    }

    #[test]
    fn destinations_parse() {
        assert_eq!("null".parse(), Ok(Destination::Null));
        assert_eq!("libc".parse(), Ok(Destination::Libc));
        assert_eq!(
            "udp:127.0.0.1:514".parse(),
            Ok(Destination::Udp("127.0.0.1:514".parse().expect("addr")))
        );
        assert_eq!(
            "unix:/run/x.sock".parse(),
            Ok(Destination::Unix("/run/x.sock".into()))
        );
        assert!("unix:rel".parse::<Destination>().is_err());
        assert!("tcp:1.2.3.4:5".parse::<Destination>().is_err());
    }
}
