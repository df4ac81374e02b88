/*
 * quiver-pmix shim: the few PMIx client calls quiver needs, behind plain C types, so the
 * Rust side never lays out PMIx structures (pmix_proc_t, pmix_value_t, pmix_info_t) itself.
 * Compiled by build.rs against the headers pkg-config names for `pmix`.
 *
 * Every function returns a PMIx status (PMIX_SUCCESS == 0, errors negative). Strings handed
 * out (quiver_pmix_get_string) are malloc'ed copies the caller frees with quiver_pmix_free.
 */
#include <pmix.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* This process's identity, filled by quiver_pmix_init. */
static pmix_proc_t me;

/* Reads a uint32 job-level value (PMIX_JOB_SIZE, PMIX_LOCAL_SIZE) of this namespace. */
static pmix_status_t get_job_u32(const char *key, uint32_t *out)
{
    pmix_proc_t wildcard;
    pmix_value_t *value = NULL;
    PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
    pmix_status_t rc = PMIx_Get(&wildcard, key, NULL, 0, &value);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    if (value == NULL) {
        return PMIX_ERR_NOT_FOUND;
    }
    switch (value->type) {
    case PMIX_UINT32:
        *out = value->data.uint32;
        break;
    case PMIX_UINT16:
        *out = value->data.uint16;
        break;
    case PMIX_INT:
        *out = value->data.integer < 0 ? 0 : (uint32_t)value->data.integer;
        break;
    default:
        rc = PMIX_ERR_TYPE_MISMATCH;
        break;
    }
    PMIX_VALUE_RELEASE(value);
    return rc;
}

int quiver_pmix_init(uint32_t *rank, uint32_t *size, uint32_t *local_size, char *nspace,
                     size_t nspace_capacity)
{
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    *rank = me.rank;
    rc = get_job_u32(PMIX_JOB_SIZE, size);
    if (rc != PMIX_SUCCESS) {
        PMIx_Finalize(NULL, 0);
        return rc;
    }
    if (get_job_u32(PMIX_LOCAL_SIZE, local_size) != PMIX_SUCCESS) {
        *local_size = 0; /* unknown */
    }
    if (nspace_capacity > 0) {
        size_t n = strnlen(me.nspace, PMIX_MAX_NSLEN);
        if (n >= nspace_capacity) {
            n = nspace_capacity - 1;
        }
        memcpy(nspace, me.nspace, n);
        nspace[n] = '\0';
    }
    return PMIX_SUCCESS;
}

int quiver_pmix_put_string(const char *key, const char *text)
{
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = (char *)text; /* PMIx_Put copies the value */
    return PMIx_Put(PMIX_GLOBAL, key, &value);
}

int quiver_pmix_commit(void)
{
    return PMIx_Commit();
}

int quiver_pmix_fence(int timeout_seconds)
{
    pmix_info_t info[2];
    bool collect = true;
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_seconds, PMIX_INT);
    pmix_status_t rc = PMIx_Fence(NULL, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    return rc;
}

int quiver_pmix_get_string(uint32_t rank, const char *key, int timeout_seconds, char **out)
{
    pmix_proc_t proc;
    pmix_value_t *value = NULL;
    pmix_info_t info;
    *out = NULL;
    PMIX_LOAD_PROCID(&proc, me.nspace, rank);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &timeout_seconds, PMIX_INT);
    pmix_status_t rc = PMIx_Get(&proc, key, &info, 1, &value);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    if (value == NULL) {
        return PMIX_ERR_NOT_FOUND;
    }
    if (value->type != PMIX_STRING || value->data.string == NULL) {
        PMIX_VALUE_RELEASE(value);
        return PMIX_ERR_TYPE_MISMATCH;
    }
    *out = strdup(value->data.string);
    PMIX_VALUE_RELEASE(value);
    return *out == NULL ? PMIX_ERR_NOMEM : PMIX_SUCCESS;
}

void quiver_pmix_free(char *text)
{
    free(text);
}

int quiver_pmix_finalize(void)
{
    return PMIx_Finalize(NULL, 0);
}

const char *quiver_pmix_error_string(int status)
{
    return PMIx_Error_string(status);
}

const char *quiver_pmix_version(void)
{
    return PMIx_Get_version();
}
