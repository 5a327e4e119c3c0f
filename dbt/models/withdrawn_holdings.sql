{{ config(materialized='stable_view') }}
{#- What still holds an episode of a demonstrator who withdrew consent, one row per
    (capture, holder): a release version (immutable: the operator decides), a
    per-episode export whose receipt is still staged, or a trajectory still in the
    platform's stages (a capture the withdrawal did not quarantine, e.g. one that landed
    after it). A withdrawn capture is one the withdrawal record names or whose
    demonstrator it names; the earliest withdrawal counts. A view: always current. -#}
with named as (
  select w.withdrawal_id, w.demonstrator, w.withdrawn_at, w.withdrawn_by, w.reason,
         unnest(w.capture_keys) as capture_key
  from {{ source('platform', 'consent_withdrawals') }} w
  union all
  select w.withdrawal_id, w.demonstrator, w.withdrawn_at, w.withdrawn_by, w.reason,
         h.capture_key
  from {{ source('platform', 'consent_withdrawals') }} w
  join {{ source('platform', 'trajectory_headers') }} h on h.demonstrator = w.demonstrator
  union all
  select w.withdrawal_id, w.demonstrator, w.withdrawn_at, w.withdrawn_by, w.reason,
         r.capture_key
  from {{ source('platform', 'consent_withdrawals') }} w
  join {{ source('platform', 'release_episodes') }} r on r.demonstrator = w.demonstrator
),
withdrawn as (
  select * from named
  qualify row_number() over (
    partition by capture_key order by withdrawn_at, withdrawal_id) = 1
),
holdings as (
  select capture_key, 'release' as holder_kind, release || '@v' || version as holder,
         'releases/' || release || '/v' || version as path
  from {{ source('platform', 'release_episodes') }}
  {%- for fmt in var('export_formats') %}
  union all
  select capture_key, 'export', '{{ fmt }}', path
  from {{ source('platform', 'export_receipts_' ~ fmt) }}
  {%- endfor %}
  union all
  select capture_key, 'trajectory', 'trajectory', 'trajectory/' || capture_key
  from {{ source('platform', 'trajectory_headers') }}
)
select
  w.demonstrator,
  w.capture_key,
  w.withdrawal_id,
  w.withdrawn_at,
  w.withdrawn_by,
  w.reason,
  h.holder_kind,
  h.holder,
  h.path
from withdrawn w
join holdings h using (capture_key)
