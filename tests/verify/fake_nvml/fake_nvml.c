/* A fake libnvidia-ml.so.1 for gpuenv's tests: the real pynvml bindings load it through
 * LD_LIBRARY_PATH and get the answers of a scenario file (FAKE_NVML_SCENARIO), one key=value a
 * line. A key applies to every GPU, or to one with a "gpuN." prefix. Functions a scenario lists
 * in "unsupported" return NOT_SUPPORTED; functions this file does not define are missing, as on an
 * old driver (pynvml raises FUNCTION_NOT_FOUND). See the .scenario files beside it.
 * Fabric info answers only where a scenario sets fabric_state (else FUNCTION_NOT_FOUND, as before
 * R550); pcie_idle_reads makes the first N generation reads per GPU answer pcie_gen_idle (a link
 * trained down at idle that comes up under load); proc_self lists the calling process and its
 * parent (gpuenv itself) as compute processes; mem_used_mib is the memory in use (MemoryInfo_v2),
 * with or without processes.
 * Power limits (milliwatts): power_min/power_max are the constraints, power_default the default,
 * power_limit the limit at start, power_draw what the GPU draws (usage is the lesser of it and the
 * limit; the energy counter integrates usage over time); power_set_denied makes a set call NO_PERMISSION, as for a non-root user. The driver keeps
 * a limit across processes: a set call appends "gpuN <milliwatts> <pid>" to FAKE_NVML_POWER_LOG,
 * and every read of the limit takes the GPU's last line there (else power_limit), so a test reads
 * what every process set, in order.
 * Under load: while the file FAKE_NVML_LOAD_MARKER names exists (the stand-in load of
 * GPUENV_TEST_FAULT=nvml:standin makes it), clock_events_load (default: the idle reasons less
 * GPU idle), sm_clock_load and temp_load (default: the idle temp) answer instead of the idle values,
 * and each violation counter (viol_power, viol_thermal, viol_reliability: ns) grows by its _load
 * figure (ns per second) for every second since the marker was made. sm_clock_max is the maximum SM clock; power_default and power_limit (the enforced
 * limit) model a cap.
 * A slow start: init_delay_ms makes nvmlInit take that long, as it does with persistence mode off
 * (the driver sets every GPU up on the first use and tears it down after the last client): only
 * when no other process holds NVML initialised, which the file FAKE_NVML_DRIVER_LOCK tells (each
 * initialised process holds a shared flock on it); without that variable every nvmlInit waits.
 * Faults, for the sweep of every call the health check makes: errors=FUNC:CODE,... makes a GPU's
 * functions answer those NVML return codes (errors_load=: only while the load runs); node_errors=
 * and node_errors_load= do the same for the calls that take no GPU (the driver version, the count,
 * the event set); lost=1 makes every call on the GPU, its handle's included, answer GPU_IS_LOST
 * (lost_load=1: only under load, a GPU that falls off mid-run). soak_s=N holds the _load values
 * back until the load has run N seconds (a GPU that throttles once heat-soaked): before, the GPU
 * answers as a healthy busy one. nvlink_inactive=1 makes every link inactive (a PCIe card without a
 * bridge); app_clock and app_clock_default are the SM application clocks (default sm_clock_max);
 * mem_temp, mem_temp_load and mem_temp_max the memory temperature (field 82) and its limit;
 * recovery_action the GPU recovery action (field 230) XID 154 announces. c2c_links is the count of
 * Grace-GPU C2C links (fields 170-172, 233; -1, the default: NOT_SUPPORTED, a GPU without C2C), of which
 * the last c2c_down are inactive; c2c_mbps each active link's speed, c2c_replay_b2b its back-to-back
 * replay errors. FAKE_NVML_TRACE names a
 * file each call made (on a GPU, or of the node's) is appended to, with whether the load ran. */
#include <sys/file.h>

#include "../fake_gpu.h"

#define MAXGPU 16
#define OK 0
#define E_INVALID 2
#define E_NOT_SUPPORTED 3
#define E_NO_PERMISSION 4
#define E_INSUFFICIENT 7
#define E_TIMEOUT 10
#define E_GPU_IS_LOST 15
#define E_UNINIT 1
#define E_FUNCTION_NOT_FOUND 13
#define E_VERSION_MISMATCH 25
#define FABRIC_INFO_V2 0x02000024u
#define MEMORY_V2 0x02000028u

typedef struct {
    int index;
    char name[96], uuid[96], serial[32], unsupported[512];
    int cc_major, cc_minor;
    unsigned long long ecc_uncorrected, clock_events, energy;
    int retired_pending, remap_corrected, remap_uncorrectable, remap_pending, remap_failure;
    int pcie_gen, pcie_max_gen, pcie_width, pcie_max_width;
    int persistence, temp, slowdown_temp, nvlinks, nvlink_down, procs, mig;
    int fabric_state, fabric_status, fabric_clique, compute_mode, pcie_gen_idle, pcie_idle_reads, proc_self;
    int gen_reads, mem_used_mib;
    unsigned power_min, power_max, power_default, power_limit, power_draw, power_set_denied;
    long long clock_events_load;
    int sm_clock, sm_clock_load, sm_clock_max, temp_load;
    unsigned long long viol_power, viol_thermal, viol_reliability;
    unsigned long long viol_power_load, viol_thermal_load, viol_reliability_load;
    char errors[512], errors_load[512];
    int lost, lost_load, soak_s, nvlink_inactive, app_clock, app_clock_default;
    int mem_temp, mem_temp_load, mem_temp_max, recovery_action;
    int c2c_links, c2c_down, c2c_mbps, c2c_replay_b2b;
} gpu_t;

typedef struct { void *device; unsigned long long type, data; unsigned gi, ci; } event_t;
typedef struct { char legacy[16]; unsigned domain, bus, device, id, subsys; char busId[32]; } pci_t;
typedef struct { unsigned pid; unsigned long long mem; unsigned gi, ci; } proc_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } memory_v2_t;
typedef struct {
    unsigned version; unsigned char clusterUuid[16]; unsigned status, cliqueId, state, healthMask;
} fabric_v2_t;

static gpu_t gpus[MAXGPU];
static int count = 8, init_error = 0, init_delay_ms = 0, driver_hold = -1, initialised = 0, nxid = 0, xid_next = 0, drained = 0;
static int xid_gpu[32], xid_code[32], xid_late[32];
static char driver[64] = "580.65.06", unsupported_all[512] = "", node_errors[512] = "", node_errors_load[512] = "";
static int cuda_driver = 13000;

static void defaults(void) {
    for (int i = 0; i < MAXGPU; i++) {
        gpu_t *g = &gpus[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        strcpy(g->name, "NVIDIA H100 80GB HBM3");
        snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-%012d", i);
        snprintf(g->serial, sizeof g->serial, "165000000%04d", i);
        g->cc_major = 9; g->cc_minor = 0;
        g->pcie_gen = g->pcie_max_gen = 5; g->pcie_width = g->pcie_max_width = 16;
        g->persistence = 1; g->temp = 38; g->slowdown_temp = 90; g->nvlinks = 18;
        g->nvlink_down = -1; g->clock_events = 0x1; g->energy = 1000000;
        g->fabric_state = -1; g->pcie_gen_idle = 1;
        g->power_min = 200000; g->power_max = g->power_default = g->power_limit = 700000; g->power_draw = 450000;
        g->clock_events_load = -1; g->sm_clock = 345; g->sm_clock_load = g->sm_clock_max = 1980; g->temp_load = -1;
        g->app_clock = g->app_clock_default = -1; g->mem_temp = 40; g->mem_temp_load = -1; g->mem_temp_max = 95;
        g->c2c_links = -1; g->c2c_down = 0; g->c2c_mbps = 44712; g->c2c_replay_b2b = 0;
    }
}

static void set(int gpu, const char *key, const char *val) {
    gpu_t *g = &gpus[gpu];
    unsigned long long n = strtoull(val, NULL, 0);
    if (!strcmp(key, "name")) snprintf(g->name, sizeof g->name, "%s", val);
    else if (!strcmp(key, "cc")) sscanf(val, "%d.%d", &g->cc_major, &g->cc_minor);
    else if (!strcmp(key, "unsupported")) snprintf(g->unsupported, sizeof g->unsupported, "%s", val);
    else if (!strcmp(key, "errors")) snprintf(g->errors, sizeof g->errors, "%s", val);
    else if (!strcmp(key, "errors_load")) snprintf(g->errors_load, sizeof g->errors_load, "%s", val);
#define INT(k) else if (!strcmp(key, #k)) g->k = (int)n;
#define ULL(k) else if (!strcmp(key, #k)) g->k = n;
    ULL(ecc_uncorrected) ULL(clock_events) ULL(energy)
    INT(retired_pending) INT(remap_corrected) INT(remap_uncorrectable) INT(remap_pending)
    INT(remap_failure) INT(pcie_gen) INT(pcie_max_gen) INT(pcie_width) INT(pcie_max_width)
    INT(persistence) INT(temp) INT(slowdown_temp) INT(nvlinks) INT(nvlink_down) INT(procs) INT(mig)
    INT(fabric_state) INT(fabric_status) INT(fabric_clique) INT(compute_mode) INT(pcie_gen_idle)
    INT(pcie_idle_reads) INT(proc_self) INT(mem_used_mib)
    INT(power_min) INT(power_max) INT(power_default) INT(power_limit) INT(power_draw) INT(power_set_denied)
    ULL(viol_power) ULL(viol_thermal) ULL(viol_reliability)
    ULL(viol_power_load) ULL(viol_thermal_load) ULL(viol_reliability_load)
    INT(sm_clock) INT(sm_clock_load) INT(sm_clock_max) INT(temp_load)
    INT(lost) INT(lost_load) INT(soak_s) INT(nvlink_inactive) INT(app_clock) INT(app_clock_default)
    INT(mem_temp) INT(mem_temp_load) INT(mem_temp_max) INT(recovery_action)
    INT(c2c_links) INT(c2c_down) INT(c2c_mbps) INT(c2c_replay_b2b)
    else if (!strcmp(key, "clock_events_load")) g->clock_events_load = (long long)n;
}

static int global(const char *key, const char *val) {
    if (!strcmp(key, "count")) count = atoi(val);
    else if (!strcmp(key, "driver")) snprintf(driver, sizeof driver, "%s", val);
    else if (!strcmp(key, "cuda_driver")) cuda_driver = atoi(val);
    else if (!strcmp(key, "init_error")) init_error = atoi(val);
    else if (!strcmp(key, "init_delay_ms")) init_delay_ms = atoi(val);
    else if (!strcmp(key, "unsupported")) snprintf(unsupported_all, sizeof unsupported_all, "%s", val);
    else if (!strcmp(key, "node_errors")) snprintf(node_errors, sizeof node_errors, "%s", val);
    else if (!strcmp(key, "node_errors_load")) snprintf(node_errors_load, sizeof node_errors_load, "%s", val);
    else if ((!strcmp(key, "xid") || !strcmp(key, "xid_late")) && nxid < 32
             && sscanf(val, "gpu%d:%d", &xid_gpu[nxid], &xid_code[nxid]) == 2)
        xid_late[nxid++] = !strcmp(key, "xid_late");
    else return 0;
    return 1;
}

static void load(void) {  /* every nvmlInit reads the scenario afresh: nothing of a former one stays */
    defaults();
    count = 8; init_error = init_delay_ms = nxid = xid_next = drained = 0; cuda_driver = 13000;
    snprintf(driver, sizeof driver, "580.65.06");
    unsupported_all[0] = node_errors[0] = node_errors_load[0] = 0;
    read_scenario("FAKE_NVML_SCENARIO", MAXGPU, global, set);
}

static int unsupported(gpu_t *g, const char *fn) {
    return strstr(unsupported_all, fn) || (g && strstr(g->unsupported, fn));
}

static int under_load(void) { return load_age_s("FAKE_NVML_LOAD_MARKER") >= 0; }
/* Seconds since the load marker was made (0 without a load). */
static double loaded_s(void) {
    double s = load_age_s("FAKE_NVML_LOAD_MARKER");
    return s > 0 ? s : 0;
}
/* Under load for soak_s seconds or more: the GPU answers its scenario's _load values. */
static int soaked(gpu_t *g) { return under_load() && loaded_s() >= g->soak_s; }

/* What a call on GPU g answers instead of its reading (see the header), 0 for the reading. */
static int fault(gpu_t *g, const char *fn) {
    int loaded = under_load(), e = injected(g->errors, fn);
    trace_call("FAKE_NVML_TRACE", fn, loaded);
    if (g->lost || (g->lost_load && loaded)) return E_GPU_IS_LOST;
    return e ? e : loaded ? injected(g->errors_load, fn) : 0;
}
static int node_fault(const char *fn) {
    int e = injected(node_errors, fn);
    trace_call("FAKE_NVML_TRACE", fn, under_load());
    return e ? e : under_load() ? injected(node_errors_load, fn) : 0;
}

#define GPU(h) gpu_t *g = (gpu_t *)(h); if (!initialised) return E_UNINIT; \
    { int e_ = fault(g, __func__); if (e_) return e_; } \
    if (unsupported(g, __func__)) return E_NOT_SUPPORTED;
#define NODE() if (!initialised) return E_UNINIT; { int e_ = node_fault(__func__); if (e_) return e_; }

/* The driver's start: init_delay_ms unless another process holds NVML (see the header). */
static void driver_start(void) {
    const char *lock = getenv("FAKE_NVML_DRIVER_LOCK");
    int first = 1;
    if (lock && driver_hold < 0 && (driver_hold = open(lock, O_RDWR | O_CREAT, 0644)) >= 0)
        first = flock(driver_hold, LOCK_EX | LOCK_NB) == 0;
    if (first && init_delay_ms > 0) {
        struct timespec t = {init_delay_ms / 1000, (long)(init_delay_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    if (driver_hold >= 0) flock(driver_hold, LOCK_SH);
}

int nvmlInitWithFlags(unsigned flags) {
    (void)flags; load();
    if (init_error) return init_error;
    if (!initialised) driver_start();
    initialised = 1; return OK;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) {
    initialised = 0;
    if (driver_hold >= 0) { close(driver_hold); driver_hold = -1; }
    return OK;
}
const char *nvmlErrorString(int r) {
    switch (r) { case 0: return "Success"; case 3: return "Not Supported"; case 9: return "Driver Not Loaded";
                 case 10: return "Timeout"; default: return "Fake NVML error"; }
}
int nvmlSystemGetDriverVersion(char *buf, unsigned len) { NODE() snprintf(buf, len, "%s", driver); return OK; }
int nvmlSystemGetCudaDriverVersion(int *v) { NODE() *v = cuda_driver; return OK; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }
int nvmlDeviceGetCount_v2(unsigned *n) { NODE() *n = (unsigned)count; return OK; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) {
    if (!initialised) return E_UNINIT;
    if ((int)i >= count) return E_INVALID;
    { int e_ = fault(&gpus[i], __func__); if (e_) return e_; }
    *h = &gpus[i]; return OK;
}
int nvmlDeviceGetName(void *h, char *buf, unsigned len) { GPU(h) snprintf(buf, len, "%s", g->name); return OK; }
int nvmlDeviceGetUUID(void *h, char *buf, unsigned len) { GPU(h) snprintf(buf, len, "%s", g->uuid); return OK; }
int nvmlDeviceGetSerial(void *h, char *buf, unsigned len) { GPU(h) snprintf(buf, len, "%s", g->serial); return OK; }
int nvmlDeviceGetPciInfo_v3(void *h, pci_t *p) {
    GPU(h) memset(p, 0, sizeof *p);
    p->bus = 0x18 + 0x10 * (unsigned)g->index;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
    snprintf(p->legacy, sizeof p->legacy, "0000:%02X:00.0", p->bus);
    return OK;
}
int nvmlDeviceGetCudaComputeCapability(void *h, int *ma, int *mi) { GPU(h) *ma = g->cc_major; *mi = g->cc_minor; return OK; }
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *n) {
    GPU(h) (void)counter; *n = type == 1 ? g->ecc_uncorrected : 0; return OK;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void *h, int *p) { GPU(h) *p = g->retired_pending; return OK; }
int nvmlDeviceGetRemappedRows(void *h, unsigned *c, unsigned *u, unsigned *p, unsigned *f) {
    GPU(h) *c = g->remap_corrected; *u = g->remap_uncorrectable; *p = g->remap_pending; *f = g->remap_failure; return OK;
}
int nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned *v) {
    GPU(h) *v = g->gen_reads++ < g->pcie_idle_reads ? g->pcie_gen_idle : g->pcie_gen; return OK;
}
int nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned *v) { GPU(h) *v = g->pcie_max_gen; return OK; }
int nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned *v) { GPU(h) *v = g->pcie_width; return OK; }
int nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned *v) { GPU(h) *v = g->pcie_max_width; return OK; }
int nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *v) {
    GPU(h) if (!under_load()) *v = g->clock_events;
    else if (!soaked(g) || g->clock_events_load < 0) *v = g->clock_events & ~1ULL;
    else *v = (unsigned long long)g->clock_events_load;
    return OK;
}
int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
    GPU(h) (void)type; *mhz = (unsigned)(!under_load() ? g->sm_clock : soaked(g) ? g->sm_clock_load : g->sm_clock_max);
    return OK;
}
int nvmlDeviceGetMaxClockInfo(void *h, int type, unsigned *mhz) { GPU(h) (void)type; *mhz = (unsigned)g->sm_clock_max; return OK; }
int nvmlDeviceGetApplicationsClock(void *h, int type, unsigned *mhz) {
    GPU(h) (void)type; *mhz = (unsigned)(g->app_clock < 0 ? g->sm_clock_max : g->app_clock); return OK;
}
int nvmlDeviceGetDefaultApplicationsClock(void *h, int type, unsigned *mhz) {
    GPU(h) (void)type; *mhz = (unsigned)(g->app_clock_default < 0 ? g->sm_clock_max : g->app_clock_default); return OK;
}
/* nvmlFieldValue_t: field 82 (memory temperature), 230 (GPU recovery action) and, where c2c_links is set, the
 * C2C fields (170 count; per link, scopeId: 171 status, 172 speed in MB/s, 233 back-to-back replays) answer;
 * others NOT_SUPPORTED. */
typedef struct {
    unsigned fieldId, scopeId; long long timestamp, latencyUsec; unsigned valueType, nvmlReturn; unsigned long long value;
} field_t;
int nvmlDeviceGetFieldValues(void *h, int n, field_t *values) {
    GPU(h) for (int i = 0; i < n; i++) {
        field_t *f = &values[i];
        f->valueType = 1; f->nvmlReturn = OK; f->value = 0; /* NVML_VALUE_TYPE_UNSIGNED_INT */
        if (f->fieldId == 82) f->value = (unsigned)(soaked(g) && g->mem_temp_load >= 0 ? g->mem_temp_load : g->mem_temp);
        else if (f->fieldId == 230) f->value = (unsigned)g->recovery_action;
        else if (g->c2c_links >= 0 && (f->fieldId == 170 || f->fieldId == 171 || f->fieldId == 172 || f->fieldId == 233)) {
            int active = (int)f->scopeId < g->c2c_links - g->c2c_down;
            if (f->fieldId != 170 && (int)f->scopeId >= g->c2c_links) f->nvmlReturn = E_INVALID;
            else if (f->fieldId == 170) f->value = (unsigned)g->c2c_links;
            else if (f->fieldId == 171) f->value = (unsigned)active;
            else if (f->fieldId == 172) f->value = active ? (unsigned)g->c2c_mbps : 0;
            else f->value = (unsigned)g->c2c_replay_b2b;
        }
        else f->nvmlReturn = E_NOT_SUPPORTED;
    }
    return OK;
}
typedef struct { unsigned long long reference, violation; } violation_t;
int nvmlDeviceGetViolationStatus(void *h, int policy, violation_t *v) {
    GPU(h) double s = loaded_s();
    v->reference = 1000000000ULL;
    switch (policy) {
    case 0: v->violation = g->viol_power + (unsigned long long)(s * (double)g->viol_power_load); return OK;
    case 1: v->violation = g->viol_thermal + (unsigned long long)(s * (double)g->viol_thermal_load); return OK;
    case 5: v->violation = g->viol_reliability + (unsigned long long)(s * (double)g->viol_reliability_load); return OK;
    default: v->violation = 0; return OK;
    }
}
int nvmlDeviceGetPersistenceMode(void *h, int *v) { GPU(h) *v = g->persistence; return OK; }
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *v) {
    GPU(h) (void)sensor; *v = (unsigned)(soaked(g) && g->temp_load >= 0 ? g->temp_load : g->temp); return OK;
}
int nvmlDeviceGetTemperatureThreshold(void *h, int which, unsigned *v) {
    GPU(h) *v = (unsigned)(which == 2 ? g->mem_temp_max : g->slowdown_temp); return OK; /* 2: NVML_TEMPERATURE_THRESHOLD_MEM_MAX */
}
int nvmlDeviceGetNvLinkState(void *h, unsigned link, unsigned *active) {
    GPU(h) if (g->nvlinks == 0) return E_NOT_SUPPORTED;
    if ((int)link >= g->nvlinks) return E_INVALID;
    *active = !g->nvlink_inactive && (int)link != g->nvlink_down; return OK;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *n, proc_t *procs) {
    GPU(h) int total = g->procs + (g->proc_self ? 2 : 0);
    if (total == 0) { *n = 0; return OK; }
    if (!procs || *n < (unsigned)total) { *n = total; return E_INSUFFICIENT; }
    for (int i = 0; i < total; i++) {
        procs[i].pid = i < g->procs ? 4242 + i : (unsigned)(i == g->procs ? getpid() : getppid());
        procs[i].mem = 1 << 30; procs[i].gi = procs[i].ci = 0;
    }
    *n = total; return OK;
}
int nvmlDeviceGetMemoryInfo_v2(void *h, memory_v2_t *m) {
    GPU(h) if (m->version != MEMORY_V2) return E_VERSION_MISMATCH;
    m->total = 80ULL << 30; m->reserved = 512ULL << 20; m->used = (unsigned long long)g->mem_used_mib << 20;
    m->free = m->total - m->reserved - m->used; return OK;
}
int nvmlDeviceGetComputeMode(void *h, int *mode) { GPU(h) *mode = g->compute_mode; return OK; }
int nvmlDeviceGetGpuFabricInfoV(void *h, fabric_v2_t *info) {
    GPU(h) if (g->fabric_state < 0) return E_FUNCTION_NOT_FOUND;
    if (info->version != FABRIC_INFO_V2) return E_VERSION_MISMATCH;
    memset(info->clusterUuid, 0xab, sizeof info->clusterUuid);
    info->status = (unsigned)g->fabric_status; info->cliqueId = (unsigned)g->fabric_clique;
    info->state = (unsigned)g->fabric_state; info->healthMask = 0; return OK;
}
int nvmlDeviceGetMigMode(void *h, unsigned *cur, unsigned *pending) { GPU(h) *cur = *pending = g->mig; return OK; }
int nvmlEventSetCreate(void **set) { NODE() *set = (void *)&xid_next; return OK; }
int nvmlEventSetFree(void *set) { (void)set; return OK; }
int nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) { GPU(h) (void)types; (void)set; return OK; }
int nvmlEventSetWait_v2(void *set, event_t *e, unsigned ms) {
    NODE() (void)set; (void)ms;
    /* "xid_late" events arrive only after the event set was drained once (later in the run) */
    if (xid_next >= nxid || (xid_late[xid_next] && !drained)) { drained = 1; return E_TIMEOUT; }
    memset(e, 0, sizeof *e);
    e->device = &gpus[xid_gpu[xid_next]]; e->type = 0x8; e->data = (unsigned long long)xid_code[xid_next];
    xid_next++; return OK;
}

/* The limit in force: the GPU's last line in FAKE_NVML_POWER_LOG, else the scenario's. */
static unsigned current_limit(gpu_t *g) {
    return (unsigned)power_log_last("FAKE_NVML_POWER_LOG", g->index, g->power_limit);
}
int nvmlDeviceGetPowerManagementLimitConstraints(void *h, unsigned *lo, unsigned *hi) {
    GPU(h) *lo = g->power_min; *hi = g->power_max; return OK;
}
int nvmlDeviceGetPowerManagementDefaultLimit(void *h, unsigned *mw) { GPU(h) *mw = g->power_default; return OK; }
int nvmlDeviceGetPowerManagementLimit(void *h, unsigned *mw) { GPU(h) *mw = current_limit(g); return OK; }
int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *mw) { GPU(h) *mw = current_limit(g); return OK; }
static unsigned usage(gpu_t *g) { unsigned limit = current_limit(g); return g->power_draw < limit ? g->power_draw : limit; }
int nvmlDeviceGetPowerUsage(void *h, unsigned *mw) { GPU(h) *mw = usage(g); return OK; }
/* The energy counter integrates the draw over time (kept across nvmlInit, which reloads the
 * scenario): between two reads under one limit it grows by min(power_draw, limit) x seconds. */
static double energy_acc[MAXGPU], energy_last[MAXGPU];
int nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    GPU(h) struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (energy_last[g->index] == 0) energy_last[g->index] = now;
    energy_acc[g->index] += (now - energy_last[g->index]) * usage(g) + 1.0;  /* mW x s = mJ; +1: never equal */
    energy_last[g->index] = now;
    *mj = g->energy + (unsigned long long)energy_acc[g->index]; return OK;
}
int nvmlDeviceSetPowerManagementLimit(void *h, unsigned mw) {
    GPU(h) if (g->power_set_denied) return E_NO_PERMISSION;
    if (mw < g->power_min || mw > g->power_max) return E_INVALID;
    return power_log_append("FAKE_NVML_POWER_LOG", g->index, mw) ? E_NOT_SUPPORTED : OK;
}
