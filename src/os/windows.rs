//! Windows (see `mod.rs` for the interface and what differs): std and memmap2 where they
//! suffice, `windows-sys` for the rest (the writer lock, file identity, free space, page and
//! memory size). Memory advice has no equivalent here and is done as nothing.

use memmap2::{MmapOptions, MmapRaw};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::fs::{FileExt, OpenOptionsExt};
use std::os::windows::io::AsRawHandle;
use std::path::Path;
use std::sync::OnceLock;
use windows_sys::Win32::Foundation::{ERROR_IO_PENDING, ERROR_LOCK_VIOLATION, HANDLE};
use windows_sys::Win32::Storage::FileSystem::{
    FileIdInfo, GetDiskFreeSpaceExW, GetFileInformationByHandle, GetFileInformationByHandleEx,
    LockFileEx, UnlockFileEx, BY_HANDLE_FILE_INFORMATION, FILE_ID_INFO, FILE_READ_ATTRIBUTES,
    LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::SystemInformation::{
    GetSystemInfo, GlobalMemoryStatusEx, MEMORYSTATUSEX, SYSTEM_INFO,
};
use windows_sys::Win32::System::IO::OVERLAPPED;

/// The page size of this machine, asked once at run time.
pub fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    *PS.get_or_init(|| {
        let mut info = SYSTEM_INFO::default();
        // SAFETY: GetSystemInfo fills the struct it is given and cannot fail.
        unsafe { GetSystemInfo(&mut info) };
        if info.dwPageSize > 0 {
            info.dwPageSize as usize
        } else {
            4096
        }
    })
}

/// Bytes of physical memory, asked once (None where the system does not say).
pub fn physical_memory() -> Option<u64> {
    static PM: OnceLock<Option<u64>> = OnceLock::new();
    *PM.get_or_init(|| {
        let mut st =
            MEMORYSTATUSEX { dwLength: size_of::<MEMORYSTATUSEX>() as u32, ..Default::default() };
        // SAFETY: a struct of the right type whose dwLength says its size, as the call needs.
        let ok = unsafe { GlobalMemoryStatusEx(&mut st) };
        (ok != 0 && st.ullTotalPhys > 0).then_some(st.ullTotalPhys)
    })
}

/// The version of Wine running this process (ntdll's `wine_get_version`, which Windows' own
/// ntdll lacks), asked once; None on Windows itself. Tests leave out what Wine does differently
/// from Windows (docs/platforms.md, "What Wine cannot show") only where this answers.
pub fn wine_version() -> Option<String> {
    static WINE: OnceLock<Option<String>> = OnceLock::new();
    WINE.get_or_init(|| {
        let name: Vec<u16> = "ntdll.dll".encode_utf16().chain(std::iter::once(0)).collect();
        // SAFETY: a NUL-terminated wide name. ntdll is loaded in every process, and
        // GetModuleHandleW takes no reference that would need releasing.
        let ntdll = unsafe { GetModuleHandleW(name.as_ptr()) };
        if ntdll.is_null() {
            return None;
        }
        // SAFETY: a module handle from above and a NUL-terminated name.
        let f = unsafe { GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()) }?;
        // SAFETY: Wine declares `const char *wine_get_version(void)`; on x86_64 its C calling
        // convention is the system's. It returns a static NUL-terminated string.
        let version = unsafe {
            let get = std::mem::transmute::<
                unsafe extern "system" fn() -> isize,
                unsafe extern "system" fn() -> *const std::ffi::c_char,
            >(f);
            let p = get();
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        Some(version.unwrap_or_default())
    })
    .clone()
}

// ---------------------------------------------------------------------- files

/// Read `buf.len()` bytes at `offset`, or fail with UnexpectedEof at the file's end. (Windows
/// moves the file position as it reads; nothing here uses the position.)
pub fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "failed to fill whole buffer",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read at most `buf.len()` bytes at `offset`; 0 at the file's end.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// Write all of `buf` at `offset`.
pub fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.seek_write(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Which file a path or an open file is, to tell whether a path still names the file that is
/// open (a compaction renames a new file over it): the volume serial number and the file id,
/// 128 bits where the file system reports them (`FileIdInfo`, needed on ReFS), else the 64-bit
/// index of `GetFileInformationByHandle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    volume: u64,
    id: [u8; 16],
}

/// The identity of an open file.
pub fn file_id(file: &File) -> io::Result<FileId> {
    let handle = file.as_raw_handle() as HANDLE;
    let mut info = FILE_ID_INFO::default();
    // SAFETY: a valid handle (borrowed from `file`) and an out-buffer of the size passed, of
    // the type FileIdInfo fills.
    let ok = unsafe {
        GetFileInformationByHandleEx(
            handle,
            FileIdInfo,
            (&mut info as *mut FILE_ID_INFO).cast(),
            size_of::<FILE_ID_INFO>() as u32,
        )
    };
    if ok != 0 {
        return Ok(FileId { volume: info.VolumeSerialNumber, id: info.FileId.Identifier });
    }
    // File systems without 128-bit ids (FAT, some network shares).
    let mut info = BY_HANDLE_FILE_INFORMATION::default();
    // SAFETY: a valid handle and an out-struct of the right type.
    if unsafe { GetFileInformationByHandle(handle, &mut info) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&index.to_le_bytes());
    Ok(FileId { volume: u64::from(info.dwVolumeSerialNumber), id })
}

/// The identity of the file a path names now. Opens it for its attributes only (no read or
/// write access, sharing everything), so this works whoever else has it open.
pub fn path_id(path: &Path) -> io::Result<FileId> {
    let file = OpenOptions::new().access_mode(FILE_READ_ATTRIBUTES).open(path)?;
    file_id(&file)
}

/// The C runtime's ENOSPC (what Python's `errno.ENOSPC` is on Windows).
pub const ENOSPC: i32 = 28;

/// The OS error number of an I/O error as a C runtime `errno` value, for the kinds of error
/// the index meets (a full disk, a missing file, a file in use, ...); None for the rest and for
/// errors that did not come from a system call. The Windows error code itself is not an errno
/// (Python's `OSError.errno` would misread it); the message still carries its text.
pub fn errno(err: &io::Error) -> Option<i32> {
    use io::ErrorKind::*;
    // ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION: EACCES, as Python maps them.
    if matches!(err.raw_os_error()?, 32 | 33) {
        return Some(13);
    }
    Some(match err.kind() {
        NotFound => 2,          // ENOENT
        Interrupted => 4,       // EINTR
        OutOfMemory => 12,      // ENOMEM
        PermissionDenied => 13, // EACCES
        AlreadyExists => 17,    // EEXIST
        CrossesDevices => 18,   // EXDEV
        NotADirectory => 20,    // ENOTDIR
        IsADirectory => 21,     // EISDIR
        InvalidInput => 22,     // EINVAL
        FileTooLarge => 27,     // EFBIG
        StorageFull | QuotaExceeded => ENOSPC,
        ReadOnlyFilesystem => 30, // EROFS
        InvalidFilename => 38,    // ENAMETOOLONG
        DirectoryNotEmpty => 41,  // ENOTEMPTY
        _ => return None,
    })
}

/// Where the writer lock sits: one byte at 4 EiB, past the end of any file the index makes.
/// Windows byte-range locks are mandatory (reads and writes of a locked range through other
/// handles fail with ERROR_LOCK_VIOLATION), so the lock must not cover the bytes readers read;
/// a lock past the end of the file is allowed and blocks nothing but another lock.
const LOCK_OFFSET: u64 = 1 << 62;

fn lock_overlapped() -> OVERLAPPED {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = LOCK_OFFSET as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (LOCK_OFFSET >> 32) as u32;
    ov
}

/// Try to take the exclusive writer lock on `file` without waiting. `Ok(false)`: someone else
/// holds it. A `LockFileEx` lock belongs to the handle, so a second open of the same file in
/// this process conflicts too, which is what "one writer per file" needs.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    let mut ov = lock_overlapped();
    // SAFETY: a valid handle borrowed from `file`; the OVERLAPPED (zeroed but for the offset,
    // no event) lives across the call, which completes before returning on a handle opened
    // without FILE_FLAG_OVERLAPPED, as std opens them.
    let ok = unsafe {
        LockFileEx(
            file.as_raw_handle() as HANDLE,
            LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY,
            0,
            1,
            0,
            &mut ov,
        )
    };
    if ok != 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(c) if c == ERROR_LOCK_VIOLATION as i32 || c == ERROR_IO_PENDING as i32 => Ok(false),
        _ => Err(e),
    }
}

/// Release the writer lock (closing the file would too, but a snapshot may keep it open).
pub fn unlock(file: &File) {
    let mut ov = lock_overlapped();
    // SAFETY: as in `try_lock_exclusive`; unlocking a range that is not locked only fails.
    unsafe { UnlockFileEx(file.as_raw_handle() as HANDLE, 0, 1, 0, &mut ov) };
}

fn overlapped_at(offset: u64) -> OVERLAPPED {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = offset as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
    ov
}

/// Take (`on`) or release a shared lock on the byte at `offset` of `file`, a reader's pin
/// (`storage::pins`). A `LockFileEx` lock belongs to the handle. Taking one waits while a
/// writer tests the range (`pinned_by_other`), which it holds for one call.
pub fn pin_byte(file: &File, offset: u64, on: bool) -> io::Result<()> {
    let mut ov = overlapped_at(offset);
    let h = file.as_raw_handle() as HANDLE;
    // SAFETY: as in `try_lock_exclusive`: a valid handle and an OVERLAPPED that outlives the
    // call, which completes before returning.
    let ok = unsafe {
        if on {
            LockFileEx(h, 0, 0, 1, 0, &mut ov)
        } else {
            UnlockFileEx(h, 0, 1, 0, &mut ov)
        }
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a handle holds a lock on a byte of `[start, start + len)`: an exclusive lock over
/// the range is tried without waiting, and let go at once if it was granted. (This handle's
/// own pins count too, unlike on Linux: the caller counts them anyway.)
pub fn pinned_by_other(file: &File, start: u64, len: u64) -> io::Result<bool> {
    let mut ov = overlapped_at(start);
    let h = file.as_raw_handle() as HANDLE;
    let (lo, hi) = (len as u32, (len >> 32) as u32);
    // SAFETY: as in `pin_byte`.
    let ok = unsafe {
        LockFileEx(h, LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0, lo, hi, &mut ov)
    };
    if ok != 0 {
        let mut ov = overlapped_at(start);
        // SAFETY: as above; the range is the one just locked.
        unsafe { UnlockFileEx(h, 0, lo, hi, &mut ov) };
        return Ok(false);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(c) if c == ERROR_LOCK_VIOLATION as i32 || c == ERROR_IO_PENDING as i32 => Ok(true),
        _ => Err(e),
    }
}

/// Nothing: NTFS allocates the blocks of a file that is not sparse when `set_len` grows it (and
/// that fails on a full disk), so a write through a mapping cannot meet a hole.
pub fn preallocate(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let _ = (file, offset, len);
    Ok(())
}

/// Nothing: the file is not sparse, so there are no blocks to give back.
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let _ = (file, offset, len);
    Ok(())
}

/// Make a closed file's data and metadata durable. `FlushFileBuffers` needs a handle with
/// write access, so the file is opened for writing (it is never written through).
pub fn sync_file(path: &Path) -> io::Result<()> {
    OpenOptions::new().write(true).open(path)?.sync_all()
}

/// Nothing: Windows has no directory sync; NTFS journals the create, link or rename, which
/// become durable with its log.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    let _ = path;
    Ok(())
}

/// Free bytes for this user on the volume holding `path`, if the system says.
pub fn free_space(path: &Path) -> Option<u64> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let wide: Vec<u16> = dir.as_os_str().encode_wide().chain(std::iter::once(0)).collect();
    let mut avail = 0u64;
    // SAFETY: a NUL-terminated wide path and one out-pointer to a u64; the two other outputs
    // are optional (null).
    let ok = unsafe {
        GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, std::ptr::null_mut(), std::ptr::null_mut())
    };
    (ok != 0).then_some(avail)
}

// ---------------------------------------------------------------------- memory advice
//
// No huge pages for file mappings, no madvise: every request is answered by doing nothing.

/// No huge pages here: false (not granted).
pub fn advise_huge(p: *const u8, len: usize, on: bool) -> bool {
    let _ = (p, on);
    len == 0
}

/// Nothing (ADR-0019: no warm on Windows; `populate_mode` says `Nothing`).
pub fn populate(p: *const u8, len: usize) {
    let _ = (p, len);
}

/// Run `f` on a thread of its own (where the system places it). None when the system gives no
/// thread.
pub fn spawn_elsewhere(f: impl FnOnce() + Send + 'static) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("chassis-helper".into()).spawn(f).ok()
}

/// True: there is no such advice here.
pub fn populate_write_refused() -> bool {
    true
}

/// Nothing (no such advice): the writes take their faults one by one.
pub fn populate_write(p: *const u8, len: usize) -> bool {
    let _ = (p, len);
    false
}

/// Nothing.
pub fn fadvise_willneed(file: &File, offset: u64, len: usize) {
    let _ = (file, offset, len);
}

/// Nothing.
pub fn advise_random(p: *const u8, len: usize) {
    let _ = (p, len);
}

/// Nothing: the process keeps its pages (see the Unix `release_shared`).
///
/// # Safety
/// As the Unix `release_shared`: a range of a live shared file mapping.
pub unsafe fn release_shared(p: *const u8, len: usize) {
    let _ = (p, len);
}

/// Nothing.
pub fn advise_sequential(p: *const u8, len: usize) {
    let _ = (p, len);
}

/// Nothing.
pub fn advise_normal(p: *const u8, len: usize) {
    let _ = (p, len);
}

/// None: not measured on Windows (the mappings get no advice there anyway).
pub fn memory_available() -> Option<u64> {
    None
}

/// 0: Windows has no `mincore` (the resident bytes are not measured).
pub fn resident(p: *const u8, len: usize) -> u64 {
    let _ = (p, len);
    0
}

// ---------------------------------------------------------------------- mappings

/// A mapping of `len` bytes of a file, or a zeroed anonymous store, at whatever address
/// Windows picks: with no transparent huge pages there is nothing to align for. Same interface
/// as on Unix; memmap2 maps and unmaps.
pub struct AlignedMap {
    map: MmapRaw,
    /// Of a file (else anonymous: nothing to flush).
    file_backed: bool,
}

impl AlignedMap {
    /// A mapping of its own: always, here (anonymous stores are mappings too).
    pub fn is_own_mapping(&self) -> bool {
        true
    }

    /// Map `[offset, offset + len)` of `file` (which covers it: Windows would grow a file
    /// under a writable mapping past its end, and refuse a read-only one). `align` is for
    /// huge pages, which Windows does not give file mappings; it is not needed.
    pub fn new(
        file: &File,
        offset: u64,
        len: usize,
        writable: bool,
        align: usize,
    ) -> io::Result<AlignedMap> {
        let _ = align;
        let mut opts = MmapOptions::new();
        // Exactly the protection asked for (no probing the handle for more).
        opts.offset(offset).len(len).no_probe_handle();
        let map = if writable { opts.map_raw(file)? } else { opts.map_raw_read_only(file)? };
        Ok(AlignedMap { map, file_backed: true })
    }

    /// A zeroed anonymous store of `len` bytes (page-file backed, committed as touched).
    /// `huge` is a request Windows has no equivalent of.
    pub fn anonymous(len: usize, huge: bool) -> io::Result<AlignedMap> {
        let _ = huge;
        let map = MmapOptions::new().len(len.max(1)).map_anon()?;
        Ok(AlignedMap { map: MmapRaw::from(map), file_backed: false })
    }

    /// Nothing: no huge pages for anonymous memory without privileges (the THP note).
    pub fn advise_anon_huge(&self, _on: bool) {}

    /// Not here (see the Unix `discard`): the memory stays; false.
    pub fn discard(&self) -> bool {
        false
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Write the mapping's changed pages to the file (`FlushViewOfFile`); `sync_data`
    /// (`FlushFileBuffers` of the file) then makes them durable, once for all mappings.
    pub fn flush(&self) -> io::Result<()> {
        if !self.file_backed {
            return Ok(());
        }
        self.map.flush_async()
    }
}
