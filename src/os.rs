//! The few operating-system calls the core makes beyond std, each with its fallback where the
//! system lacks it. Probed results are cached.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::OnceLock;

/// The page size of this machine, asked once at run time.
pub fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    *PS.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as usize
        } else {
            4096
        }
    })
}

/// Try to take the exclusive writer lock on `file` without waiting. `Ok(false)`: someone else
/// holds it. `flock` locks belong to the open file description, so a second open of the same
/// file in this process conflicts too, which is what "one writer per file" needs.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a valid descriptor owned by `file`.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) || e.raw_os_error() == Some(libc::EAGAIN) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Give `[offset, offset + len)` of the file real blocks, so that writing through a mapping
/// into it cannot fail (a write to a sparse hole on a full disk raises SIGBUS). Where the
/// system has no such call, nothing is done and the file stays sparse.
pub fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: posix_fallocate on a valid descriptor; it reports errors by return value.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset as libc::off_t, len as libc::off_t) };
        match r {
            0 => Ok(()),
            // Filesystems without fallocate (some network ones): keep going sparse.
            libc::EOPNOTSUPP | libc::ENOSYS => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, offset, len);
        Ok(())
    }
}

/// Make the file's data durable. On Linux, `fdatasync` also writes back pages changed through
/// shared mappings; elsewhere the caller must `msync` its mappings first.
pub fn sync_data(file: &File) -> io::Result<()> {
    file.sync_data()
}

/// Make a directory entry durable (after a create or rename).
pub fn sync_dir(path: &std::path::Path) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    File::open(dir)?.sync_all()
}

/// Release the writer lock (closing the file would too, but a snapshot may keep it open).
pub fn unlock(file: &File) {
    // SAFETY: flock on a valid descriptor owned by `file`.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

/// Free bytes for an unprivileged user on the filesystem holding `path`, if the system says.
pub fn free_space(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, for which all zero bytes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct of the right type.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}
