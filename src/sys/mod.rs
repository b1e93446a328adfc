//! Every foreign call podwarden makes, behind safe functions.
//!
//! This is the one module allowed to use `unsafe` (`unsafe_code` is denied
//! for the whole crate and allowed only on `mod sys` in lib.rs; clippy's
//! `undocumented_unsafe_blocks` is denied too, so each block states why it is
//! sound in a `// SAFETY:` comment). Each function here is safe for every
//! input its signature admits: descriptors come in as `BorrowedFd`/`OwnedFd`
//! (open, and owned where ownership moves), paths as `&CStr` (NUL-terminated,
//! the callers convert and word their own errors), buffers as slices. Errors
//! are `std::io::Error`s from `errno`, exactly as the calls reported them.
//!
//! - libc: files (`openat`, `fstat`, `renameat2`, `mkfifo`), mounts, the
//!   eventfd, `poll`, terminals (`tcgetattr`, raw mode, the window size),
//!   the current thread's name, `_exit`, `kill`, network
//!   interfaces, `uname`, peer credentials, glibc's allocator tuning;
//! - grpcio: handing an accepted connection to a server;
//! - [`libyaml`]: libyaml's event parser (`unsafe-libyaml`) as a safe event
//!   reader.
//!
//! Owns nothing. May use no other part of podwarden: it is a leaf.

pub mod libyaml;

use std::ffi::CStr;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// `Ok(())` if a libc call returned 0, the `errno` error otherwise.
fn zero_or_errno(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// A descriptor a libc call just returned (or -1 and `errno`), owned.
///
/// The caller passes only the return value of a call that creates a new
/// descriptor nobody else holds (open, eventfd): that is what makes the
/// `OwnedFd` sound.
fn new_fd(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every caller passes the result of a call that just created
    // this descriptor (see above); it is open and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

// ---------------------------------------------------------------- files

/// `openat(dir, name, flags)`; `dir` `None` is the current directory
/// (`AT_FDCWD`). The flags are passed as given (add `O_CLOEXEC` yourself);
/// a mode of 0 is always passed, so flags with `O_CREAT`/`O_TMPFILE` create
/// a file nobody may open again (podwarden never does that here).
pub fn openat(dir: Option<BorrowedFd<'_>>, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `name` is a valid NUL-terminated string for the call; `at` is
    // AT_FDCWD or a descriptor kept open by the borrow; the variadic mode
    // argument is always supplied, so O_CREAT cannot read a missing one.
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags, 0 as libc::c_uint) };
    new_fd(fd)
}

/// `fstat(fd)`.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    // SAFETY: `stat` is plain old data (integers only): all zeroes is a
    // valid value, overwritten by the call below.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the borrow; `st` is a valid, writable stat.
    zero_or_errno(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// The size in bytes of the filesystem holding `path` (`statvfs`:
/// `f_blocks * f_frsize`).
pub fn filesystem_bytes(path: &CStr) -> io::Result<u64> {
    statvfs(path).map(|f| f.blocks.saturating_mul(f.frsize))
}

/// A filesystem's figures (`statvfs`): blocks of `frsize` bytes, inodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsFigures {
    pub frsize: u64,
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
}

/// `statvfs` of the filesystem holding `path`.
pub fn statvfs(path: &CStr) -> io::Result<FsFigures> {
    // SAFETY: `statvfs` is plain old data (integers only): all zeroes is a
    // valid value, overwritten by the call below.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid NUL-terminated string for the call; `st`
    // is a valid, writable statvfs.
    zero_or_errno(unsafe { libc::statvfs(path.as_ptr(), &mut st) })?;
    Ok(FsFigures {
        frsize: st.f_frsize as u64,
        blocks: st.f_blocks as u64,
        bfree: st.f_bfree as u64,
        bavail: st.f_bavail as u64,
        files: st.f_files as u64,
        ffree: st.f_ffree as u64,
    })
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)`: rename,
/// failing with `EEXIST` (`AlreadyExists`) instead of replacing `to`.
pub fn rename_noreplace(from: &CStr, to: &CStr) -> io::Result<()> {
    // SAFETY: two valid NUL-terminated paths, relative to the cwd; the call
    // reads nothing else.
    zero_or_errno(unsafe {
        libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE)
    })
}

/// `faccessat(AT_FDCWD, path, W_OK, AT_EACCESS)`: whether this process
/// may write `path` (a read-only mount or an immutable file says no even
/// to root).
pub fn writable(path: &CStr) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path, relative to the cwd; the call
    // reads nothing else.
    zero_or_errno(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::W_OK, libc::AT_EACCESS) })
}

/// `geteuid()`: this process's effective user ID.
pub fn effective_uid() -> u32 {
    // SAFETY: no arguments; always succeeds.
    unsafe { libc::geteuid() }
}

/// `mkfifo(path, mode)` (tests use it to plant FIFOs).
pub fn mkfifo(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path; the call reads nothing else.
    zero_or_errno(unsafe { libc::mkfifo(path.as_ptr(), mode) })
}

// --------------------------------------------------------------- mounts

/// Mount a tmpfs at `target` with `MS_NOSUID | MS_NODEV` and the tmpfs
/// options `options` (e.g. `mode=0777,size=1024`).
pub fn mount_tmpfs(target: &CStr, options: &CStr) -> io::Result<()> {
    let fstype = c"tmpfs";
    // SAFETY: source, target and type are valid NUL-terminated strings;
    // tmpfs reads its data argument as a NUL-terminated option string, which
    // `options` is.
    zero_or_errno(unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    })
}

/// Mount a hugetlbfs (`nodev`, `nosuid`) at `target` with `options` (a
/// NUL-terminated option string: `pagesize=...,mode=...`).
pub fn mount_hugetlbfs(target: &CStr, options: &CStr) -> io::Result<()> {
    let fstype = c"hugetlbfs";
    // SAFETY: source, target and type are valid NUL-terminated strings;
    // hugetlbfs reads its data argument as a NUL-terminated option string,
    // which `options` is.
    zero_or_errno(unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    })
}

/// Bind-mount the file or directory `fd` refers to onto `target`, through
/// `/proc/self/fd/N`: the kernel mounts exactly the object the descriptor
/// holds, so no path is resolved again (what a container could swap for a
/// symlink between a check and the mount).
pub fn bind_mount_fd(fd: BorrowedFd<'_>, target: &CStr) -> io::Result<()> {
    let source = std::ffi::CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL in a number");
    // SAFETY: source and target are valid NUL-terminated strings; a bind
    // mount reads no filesystem type and no data (both null); `fd` stays
    // open for the borrow, so the magic link names it during the call.
    zero_or_errno(unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
    })
}

/// `mkdirat(dir, name, mode)` (the umask applies).
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string; `dir` is open for
    // the borrow.
    zero_or_errno(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

/// `umount2(target, MNT_DETACH)`: a lazy unmount.
pub fn unmount_detach(target: &CStr) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated path; the call reads nothing else.
    zero_or_errno(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) })
}

// ------------------------------------------------------------ terminals

/// The terminal settings of `fd` (`tcgetattr`); an error when `fd` is not
/// a terminal.
pub fn terminal_attrs(fd: BorrowedFd<'_>) -> io::Result<libc::termios> {
    // SAFETY: termios is plain data; all-zero is a valid value to be
    // overwritten.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the call; `t` is a valid, writable termios.
    zero_or_errno(unsafe { libc::tcgetattr(fd.as_raw_fd(), &mut t) })?;
    Ok(t)
}

/// Set the terminal settings of `fd` at once (`tcsetattr`, `TCSANOW`).
pub fn set_terminal_attrs(fd: BorrowedFd<'_>, t: &libc::termios) -> io::Result<()> {
    // SAFETY: `fd` is open for the call; `t` is a valid termios, only read.
    zero_or_errno(unsafe { libc::tcsetattr(fd.as_raw_fd(), libc::TCSANOW, t) })
}

/// `t` in raw mode (`cfmakeraw`): no echo, no line editing, no signals
/// from keys, bytes as they come.
pub fn raw_terminal_attrs(t: &libc::termios) -> libc::termios {
    let mut raw = *t;
    // SAFETY: `raw` is a valid, writable termios; cfmakeraw only changes
    // its flags.
    unsafe { libc::cfmakeraw(&mut raw) };
    raw
}

/// The terminal `fd`'s size in (columns, rows) (`TIOCGWINSZ`).
pub fn window_size(fd: BorrowedFd<'_>) -> io::Result<(u16, u16)> {
    let mut w = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes one winsize to the valid pointer given; `fd`
    // is open for the call.
    zero_or_errno(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut w) })?;
    Ok((w.ws_col, w.ws_row))
}

// ---------------------------------------------------- events and polling

/// A new eventfd (counter 0) with `flags` (`EFD_CLOEXEC`, `EFD_NONBLOCK`).
/// Read and write it as a `File` (8-byte counter values).
pub fn eventfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
    new_fd(unsafe { libc::eventfd(0, flags) })
}

/// Wake whoever polls the eventfd `fd`: add 1 to its counter. Never fails
/// short of a counter at 2^64-1 (a non-blocking write then says EAGAIN),
/// and the poller is awake anyway then.
pub fn eventfd_poke(fd: &std::fs::File) {
    use std::io::Write;
    let _ = (&*fd).write(&1u64.to_ne_bytes());
}

/// Make reads of `fd` return `WouldBlock` instead of waiting.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller borrows for the call
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Shut a socket down both ways (`shutdown(2)`): a thread blocked in
/// `accept` on a listening socket returns at once (EINVAL on Linux), which
/// nothing else achieves without a connection the socket may no longer be
/// reachable for (its file removed). Errors are ignored: a socket already
/// shut down is what the caller wants.
pub fn shutdown_socket(s: &impl AsRawFd) {
    // SAFETY: shutdown takes any descriptor and only acts on sockets; the
    // caller's borrow keeps the descriptor open through the call
    unsafe {
        libc::shutdown(s.as_raw_fd(), libc::SHUT_RDWR);
    }
}

/// Bound the silence of a TCP connection: keep-alive probes after `idle`
/// without traffic, every `interval`, `count` unanswered ones ending it,
/// and data unacknowledged for `user_timeout` ending it too
/// (`TCP_USER_TIMEOUT`): a peer that vanished without closing (a cable
/// pulled, a NAT that forgot the flow) is found in about `idle +
/// interval * count` instead of the kernel's two hours.
pub fn tcp_bound_silence(
    s: &impl AsRawFd,
    idle: std::time::Duration,
    interval: std::time::Duration,
    count: u32,
    user_timeout: std::time::Duration,
) -> io::Result<()> {
    let set = |level: libc::c_int, name: libc::c_int, v: libc::c_int| -> io::Result<()> {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live
        // local; the caller's borrow keeps the descriptor open
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                level,
                name,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    };
    let secs = |d: std::time::Duration| d.as_secs().clamp(1, 32767) as libc::c_int;
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(idle))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(interval))?;
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, count.clamp(1, 127) as libc::c_int)?;
    set(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, user_timeout.as_millis().min(i32::MAX as u128) as libc::c_int)
}

/// `poll(fds, timeout_ms)`: the number of entries with events; `revents`
/// is filled in. A negative timeout waits for ever. Any descriptor numbers
/// are sound (a closed one reports `POLLNVAL`); `EINTR` is an error of kind
/// `Interrupted`.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    // SAFETY: `fds` is a valid, writable array of `fds.len()` pollfds for the
    // duration of the call; poll writes only their `revents`.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Start a TCP connection to `addr` without waiting for it: the socket is
/// non-blocking and close-on-exec; the connect may still be in progress
/// (poll for `POLLOUT`, then `TcpStream::take_error` says how it ended).
/// An error the connect reports at once (an unreachable network) is
/// returned.
pub fn tcp_connect_nonblocking(addr: std::net::SocketAddr) -> io::Result<std::net::TcpStream> {
    let (family, storage, len) = sockaddr_of(addr);
    // SAFETY: socket takes no pointers; it returns a new descriptor or -1.
    let fd = new_fd(unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `storage` is a sockaddr_storage holding a sockaddr_in or
    // sockaddr_in6 of `len` bytes, valid for the call; `fd` is open.
    let r = unsafe { libc::connect(fd.as_raw_fd(), (&raw const storage).cast::<libc::sockaddr>(), len) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(std::net::TcpStream::from(fd))
}

fn sockaddr_of(addr: std::net::SocketAddr) -> (libc::c_int, libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeroes is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in; the write stays inside `storage`.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            (libc::AF_INET, storage, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
            (libc::AF_INET6, storage, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

// ---------------------------------------------------- threads, processes

/// Name the calling thread (`PR_SET_NAME`; the kernel keeps the first 15
/// bytes). Best effort: an error is ignored, as a name is cosmetic.
pub fn set_current_thread_name(name: &CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (at most 16 bytes,
    // stopping at the NUL), which `name` is; the trailing arguments are
    // unused by this option.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

/// The calling thread's timer slack in nanoseconds (`PR_GET_TIMERSLACK`):
/// how late the kernel may end its timed waits to wake it together with
/// other timers. Threads it creates start with the same slack.
pub fn timer_slack() -> u64 {
    // SAFETY: PR_GET_TIMERSLACK takes no pointers and only reads the
    // calling thread's own setting.
    (unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) }).max(0) as u64
}

/// Set the calling thread's timer slack (`PR_SET_TIMERSLACK`; 0 means the
/// thread's default, 50 µs unless inherited otherwise).
pub fn set_timer_slack(nanos: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes the value itself, no pointer, and
    // only changes the calling thread's own setting.
    zero_or_errno(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos as libc::c_ulong) })
}

/// The timer slack of the process's own threads: the slack of the thread
/// that first called [`with_timer_slack`].
static OWN_TIMER_SLACK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Run `f` with `nanos` of timer slack on this thread, so the threads it
/// starts inherit that slack; this thread's own slack is put back
/// afterwards. A kernel that refuses the slack only costs wake-ups.
pub fn with_timer_slack<T>(nanos: u64, f: impl FnOnce() -> T) -> T {
    let before = timer_slack();
    OWN_TIMER_SLACK.get_or_init(|| before);
    let slacked = set_timer_slack(nanos).is_ok();
    let r = f();
    if slacked && before > 0 {
        let _ = set_timer_slack(before);
    }
    r
}

/// Give the calling thread the timer slack of the process's own threads
/// when it inherited another one: a thread started from a thread
/// [`with_timer_slack`] made (a gRPC callback's) must not carry that slack
/// into its own timeouts.
pub fn own_timer_slack() {
    if let Some(&own) = OWN_TIMER_SLACK.get()
        && own > 0
        && timer_slack() != own
    {
        let _ = set_timer_slack(own);
    }
}

/// End the process at once with `code`: no unwinding of other threads, no
/// exit handlers or destructors of statics (grpc's C++ statics would run
/// while its threads still do).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointers and only ends the process; skipping
    // Rust destructors is sound (leaking is safe).
    unsafe { libc::_exit(code) }
}

/// `kill(pid, signal)`; signal 0 only checks that `pid` exists and may be
/// signalled.
pub fn kill(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill takes no pointers; sending a signal is not a memory
    // safety matter for this process (a handler, if any, is the signalled
    // program's own).
    zero_or_errno(unsafe { libc::kill(pid, signal) })
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, the unit of
/// `/proc/<pid>/stat` CPU times).
pub fn clock_ticks_per_second() -> i64 {
    // SAFETY: sysconf takes no pointers and only reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as i64
}

// ------------------------------------------------------------ allocator

/// The glibc tunables `podwarden run` runs under: no per-thread cache
/// (tcache) and two malloc arenas. With a thread per pod, each thread's
/// tcache keeps up to seven freed chunks of every small size for itself,
/// about 20 KiB per idle worker that no other thread can use and
/// `malloc_trim` cannot return (2 MiB with 110 pods, measured by
/// `scripts/bench.sh config`); the agent mostly waits, so the arena lock
/// those caches avoid is not contended.
///
/// Nor does it keep the stacks of threads that ended
/// (`glibc.pthread.stack_cache_size=0`): glibc caches up to 40 MiB of them
/// for reuse, and a cached stack keeps the pages its thread touched, so
/// every 110 pods that came and went left about 2 MiB resident.
///
/// And a block of 32 KiB or more is a mapping of its own, unmapped when it
/// is freed (`glibc.malloc.mmap_threshold=32768`, which also stops glibc
/// from raising the threshold as it does by default after each such free,
/// up to 32 MiB): the passing large buffers (a relist's answer, a list of
/// 110 pods as JSON, a stream's relay buffers) no longer leave holes in
/// the heap that only the next trim can return. With 110 pods, 10 watches
/// and a port-forward in flight, `scripts/bench.sh api` measured 17.0 to
/// 18.1 MB in 12 runs with it against 17.8 to 18.6 MB in 4 without.
pub const MALLOC_TUNABLES: &str = "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=2:glibc.pthread.stack_cache_size=0:glibc.malloc.mmap_threshold=32768";

/// Set in the environment of the second pass of [`reexec_with_malloc_tunables`].
pub const REEXEC_MARK: &str = "PODWARDEN_MALLOC_TUNED";

/// Execute this binary again, same PID and arguments, with
/// [`MALLOC_TUNABLES`] added to `GLIBC_TUNABLES`: glibc reads tunables only
/// when a program starts and has no call to turn the tcache off later.
/// Returns without executing when tunables for the tcache are already set
/// (by an earlier pass or by the user, whose setting wins) or on other C
/// libraries; returns the error when the exec fails, and the caller goes on
/// with the default allocator. Call it before any thread starts.
pub fn reexec_with_malloc_tunables() -> Option<std::io::Error> {
    #[cfg(target_env = "gnu")]
    {
        use std::os::unix::process::CommandExt;
        // ld.so rewrites GLIBC_TUNABLES in place as it parses it (what a
        // process sees of it afterwards can be cut short), so the second pass
        // is recognised by a variable of its own
        if std::env::var_os(REEXEC_MARK).is_some() {
            return None;
        }
        let current = std::env::var_os("GLIBC_TUNABLES").unwrap_or_default();
        if current.to_string_lossy().contains("glibc.malloc.tcache_count") {
            return None;
        }
        // the user's own tunables last: a later setting of the same name wins
        let mut tunables = std::ffi::OsString::from(MALLOC_TUNABLES);
        if !current.is_empty() {
            tunables.push(":");
            tunables.push(current);
        }
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| "podwarden".into());
        // /proc/self/exe is the running binary even when a package upgrade
        // has replaced the file
        let e = std::process::Command::new("/proc/self/exe")
            .arg0(arg0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .env(REEXEC_MARK, "1")
            .exec();
        Some(e)
    }
    #[cfg(not(target_env = "gnu"))]
    None
}

/// Cap glibc's malloc arenas at `n` (`mallopt(M_ARENA_MAX)`); a no-op on
/// other C libraries. Call it before threads start allocating (`podwarden
/// run` does so first thing): an allocation racing with it may see the old
/// limit or the new one.
pub fn limit_malloc_arenas(n: i32) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes no pointers; it sets one of glibc's allocator
    // tunables (under the main arena's lock). The limit only decides whether
    // a thread gets a new arena or shares one; glibc itself reads it
    // without a lock, so a concurrent allocation sees either value, both of
    // which are valid.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, n);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = n;
}

/// Give the pages of free heap memory back to the kernel (glibc's
/// `malloc_trim(0)`); a no-op on other C libraries.
pub fn malloc_trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers; it only releases free pages of
    // the allocator's own arenas, under their locks (thread-safe).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The kernel's page size (4 KiB on x86-64; 16 or 64 KiB on some arm64
/// kernels).
fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers and only reads a constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// How much of the stack below the caller's frame
/// [`release_stack_below_here`] leaves alone: the frames of the calls
/// the caller makes next (a channel wait) and the System V red zone.
const STACK_KEPT_BELOW: usize = 4 * 1024;

/// Give back the pages of the calling thread's stack that lie more than
/// [`STACK_KEPT_BELOW`] below the caller's frame (`madvise(MADV_DONTNEED)`):
/// a pod worker's sync pass touches about 24 KiB of stack and a thread
/// keeps every page it ever touched, so 110 idle workers held 2.6 MiB of
/// stack they were not using. The next pass faults the pages in again,
/// zeroed (a few page faults a pass). Call it from a shallow frame of a
/// thread about to wait. Returns the bytes released (0 where the stack's
/// bounds are unknown).
pub fn release_stack_below_here() -> usize {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: an all-zero pthread_attr_t is a valid out-parameter for
        // pthread_getattr_np, which initializes it (destroyed below).
        let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
        // SAFETY: pthread_self() names this (running) thread; attr is a
        // valid pointer to a writable pthread_attr_t.
        if unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) } != 0 {
            return 0;
        }
        let mut low: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        // SAFETY: attr was initialized by pthread_getattr_np; low and size
        // are valid out-pointers.
        let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut low, &mut size) };
        // SAFETY: attr was initialized above and is not used after this.
        unsafe { libc::pthread_attr_destroy(&mut attr) };
        let page = page_size();
        let (low, high) = (low as usize, low as usize + size);
        if rc != 0 || here <= low || here >= high {
            return 0;
        }
        let start = low.div_ceil(page) * page;
        let end = (here.saturating_sub(STACK_KEPT_BELOW)) / page * page;
        if end <= start {
            return 0;
        }
        // SAFETY: [start, end) lies inside this thread's own stack, more
        // than STACK_KEPT_BELOW below the live frame of this call: the
        // stack grows down, so nothing live is there (what the next calls
        // write there they write first; MADV_DONTNEED makes the pages read
        // as zeros, as fresh stack pages do). Only this thread uses its
        // stack, and it is in this call. madvise checks the range itself.
        if unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) } == 0 {
            return end - start;
        }
        0
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = here;
        0
    }
}

// -------------------------------------------------------- host identity

/// `secs` (Unix time) in the local time zone as `YYYYMMDD-hhmmss`, the
/// suffix of a rotated container log (Go's `20060102-150405`); UTC when
/// the conversion fails.
pub fn local_timestamp(secs: i64) -> String {
    let t: libc::time_t = secs;
    // SAFETY: `tm` is plain old data (integers and a pointer): all zeroes is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the
    // thread-safe form and writes only `tm`.
    let ok = !unsafe { libc::localtime_r(&t, &mut tm) }.is_null();
    if !ok {
        // SAFETY: as above, gmtime_r writes only `tm`.
        unsafe { libc::gmtime_r(&t, &mut tm) };
    }
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The kernel release and machine (`uname -r`, `uname -m`), or `None` if
/// `uname` failed.
pub fn uname() -> Option<(String, String)> {
    // SAFETY: `utsname` is plain old data (byte arrays): all zeroes is valid.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname; uname fills it.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some((s(&u.release), s(&u.machine)))
}

/// The IPv4 address of the first interface (in `getifaddrs` order) that
/// is not a loopback interface and has one; `None` if there is none or the
/// call failed.
pub fn first_ipv4_address() -> Option<Ipv4Addr> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `addrs` is a valid out pointer; on success getifaddrs stores a
    // list that is freed exactly once below.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = addrs;
    while !cur.is_null() {
        // SAFETY: `cur` is non-null and points into the list getifaddrs
        // returned, which stays allocated until freeifaddrs below.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && ifa.ifa_flags & libc::IFF_LOOPBACK as u32 == 0 {
            // SAFETY: ifa_addr is non-null and points to a sockaddr of the
            // list; every sockaddr starts with its family.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if fam == libc::AF_INET {
                // SAFETY: an address of family AF_INET is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `addrs` is the list getifaddrs allocated; no reference into it
    // outlives this call (`found` is a copy).
    unsafe { libc::freeifaddrs(addrs) };
    found
}

/// The addresses of `host` as the system resolver gives them
/// (`getaddrinfo`: `/etc/hosts`, DNS, nsswitch), in its order of
/// preference, each once. Blocks for as long as the resolver does: call it
/// only from a thread made to wait. The error is `(EAI code, text)`.
pub fn getaddrinfo(host: &str) -> Result<Vec<std::net::IpAddr>, (libc::c_int, String)> {
    let name = std::ffi::CString::new(host).map_err(|_| (libc::EAI_NONAME, "invalid host name".to_string()))?;
    // SAFETY: addrinfo is plain old data; all zeroes is a valid hint.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    hints.ai_flags = libc::AI_ADDRCONFIG;
    let mut list: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: `name` is a NUL-terminated string and `hints` a valid addrinfo
    // for the call; `list` is a valid out pointer whose list is freed once
    // below when the call succeeded.
    let rc = unsafe { libc::getaddrinfo(name.as_ptr(), std::ptr::null(), &hints, &mut list) };
    if rc != 0 {
        let text = if rc == libc::EAI_SYSTEM {
            io::Error::last_os_error().to_string()
        } else {
            // SAFETY: gai_strerror returns a pointer to a static string.
            unsafe { CStr::from_ptr(libc::gai_strerror(rc)) }.to_string_lossy().into_owned()
        };
        return Err((rc, text));
    }
    let mut out = Vec::new();
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is non-null and points into the list getaddrinfo
        // returned, which stays allocated until freeaddrinfo below.
        let ai = unsafe { &*cur };
        let ip = if ai.ai_addr.is_null() {
            None
        } else if ai.ai_family == libc::AF_INET {
            // SAFETY: an address of family AF_INET is a sockaddr_in.
            let sin = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in) };
            Some(std::net::IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
        } else if ai.ai_family == libc::AF_INET6 {
            // SAFETY: an address of family AF_INET6 is a sockaddr_in6.
            let sin6 = unsafe { &*(ai.ai_addr as *const libc::sockaddr_in6) };
            Some(std::net::IpAddr::V6(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        } else {
            None
        };
        if let Some(ip) = ip
            && !out.contains(&ip)
        {
            out.push(ip);
        }
        cur = ai.ai_next;
    }
    // SAFETY: `list` is the list getaddrinfo allocated; nothing refers into
    // it any more (`out` holds copies).
    unsafe { libc::freeaddrinfo(list) };
    Ok(out)
}

// ---------------------------------------------------------------- sockets

/// The peer's pid, uid and gid of a connected unix socket (`SO_PEERCRED`:
/// as they were when it connected).
pub fn peer_cred(s: &UnixStream) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the borrow of `s`; SO_PEERCRED
    // writes at most `len` bytes (the size of `cred`) into `cred`, and `len`
    // is a valid, writable socklen_t.
    zero_or_errno(unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred)
}

/// Hand the connected socket `conn` to the gRPC server `server`, which
/// serves it as one HTTP/2 channel and closes it when the channel ends.
/// Fails (closing `conn`) if it is not a connected stream socket, which an
/// accepted connection always is (a `UnixStream` can be made from any
/// descriptor).
pub fn grpc_serve_connection(server: &mut grpcio::Server, conn: UnixStream) -> io::Result<()> {
    let mut kind: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the descriptor is open for the borrow of `conn`; SO_TYPE
    // writes at most `len` bytes (one c_int) into `kind`.
    zero_or_errno(unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut kind as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    if kind != libc::SOCK_STREAM {
        return Err(io::Error::other("not a stream socket"));
    }
    conn.peer_addr()?; // ENOTCONN unless connected
    let fd = conn.into_raw_fd();
    // SAFETY: grpcio requires a connected stream socket that no other code
    // touches afterwards: checked just above, and `into_raw_fd` gave up our
    // ownership, so gRPC alone owns (and closes) the descriptor.
    unsafe { server.add_channel_from_fd(fd) };
    Ok(())
}

/// The process's threads now (`/proc/self/status`; 0 when unreadable).
pub fn thread_count() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Threads:")?.trim().parse().ok()))
        .unwrap_or(0)
}

/// Set `key` to `value` in the environment unless it is set already, for
/// a library that reads its configuration from there at its first use
/// (gRPC's C core). Only while the process has a single thread: false
/// (nothing set) once another thread exists, since another thread could
/// read the environment meanwhile.
pub fn default_env_single_threaded(key: &str, value: &str) -> bool {
    if std::env::var_os(key).is_some() || thread_count() != 1 {
        return false;
    }
    // SAFETY: the process has one thread (checked just above, and this
    // thread starts none in between), so nothing reads or writes the
    // environment concurrently.
    unsafe { std::env::set_var(key, value) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of `[addr, addr + len)` of this process (mincore).
    fn resident(addr: usize, len: usize) -> usize {
        let page = page_size();
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: the range is mapped (part of a live thread's stack) and
        // v has one byte per page of it.
        let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        v.iter().filter(|b| **b & 1 == 1).count()
    }

    #[inline(never)]
    fn touch(depth: usize) -> (usize, u8) {
        let buf = std::hint::black_box([depth as u8; 8192]);
        let here = std::hint::black_box(&buf) as *const _ as usize;
        if depth == 0 { (here, buf[100]) } else { touch(depth - 1) }
    }

    #[test]
    fn an_idle_threads_stack_below_its_frame_is_given_back_and_usable_again() {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                // 12 frames of 8 KiB: about 96 KiB of stack touched
                let (deep, _) = touch(12);
                let marker = 0u8;
                let top = std::hint::black_box(&marker) as *const u8 as usize;
                let lo = deep / page_size() * page_size();
                let before = resident(lo, top - 32 * 1024 - lo);
                assert!(before >= 16, "{before} pages resident after the deep calls");
                let released = release_stack_below_here();
                assert!(released >= 64 * 1024, "released {released} bytes");
                let after = resident(lo, top - 32 * 1024 - lo);
                assert_eq!(after, 0, "{before} pages resident before, {after} after");
                // the stack works again: the deep calls write and read
                // their frames on the given-back pages
                let (_, v) = touch(12);
                assert_eq!(v, 0, "the deepest frame's own bytes");
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn errors_carry_errno() {
        let e = openat(None, c"/nonexistent/podwarden-sys", libc::O_RDONLY | libc::O_CLOEXEC).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        // above any pid_max the kernel allows (4,194,304)
        let e = kill(i32::MAX, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
        assert!(kill(std::process::id() as i32, 0).is_ok());
    }

    #[test]
    fn files_eventfd_and_poll() {
        use std::io::{Read, Write};
        let dir = openat(None, c"/", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).unwrap();
        let st = fstat(std::os::fd::AsFd::as_fd(&dir)).unwrap();
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
        let ev = std::fs::File::from(eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK).unwrap());
        let mut fds = [libc::pollfd { fd: ev.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        assert_eq!(poll(&mut fds, 0).unwrap(), 0);
        (&ev).write_all(&1u64.to_ne_bytes()).unwrap();
        assert_eq!(poll(&mut fds, 0).unwrap(), 1);
        assert_ne!(fds[0].revents & libc::POLLIN, 0);
        let mut b = [0u8; 8];
        (&ev).read_exact(&mut b).unwrap();
        assert_eq!(u64::from_ne_bytes(b), 1);
        // a descriptor number that is not open is reported, not undefined
        let mut bad = [libc::pollfd { fd: i32::MAX, events: libc::POLLIN, revents: 0 }];
        assert_eq!(poll(&mut bad, 0).unwrap(), 1);
        assert_eq!(bad[0].revents, libc::POLLNVAL);
    }

    #[test]
    fn host_identity_and_peer() {
        let (release, machine) = uname().unwrap();
        assert!(!release.is_empty() && !machine.is_empty());
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(&a).unwrap();
        assert_eq!(cred.pid, std::process::id() as i32);
        assert!(clock_ticks_per_second() > 0);
    }
}
