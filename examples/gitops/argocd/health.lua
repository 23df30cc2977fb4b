-- Argo CD health of a capi-provider-operator provider (any of the seven kinds in
-- management.cluster.x-k8s.io). Argo CD runs this with `obj`, the live object, as a global.
-- Order matters: a stale status says nothing about the current spec, deletion outranks the
-- rest, and Stalled (a configuration error the operator will not retry its way out of)
-- outranks Ready.
local hs = {}

local function find(conditions, type)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or fallback
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local status = obj.status or {}
local conditions = status.conditions
local generation = obj.metadata.generation

if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = describe(find(conditions, "Deleting"), "Deleting")
  return hs
end

if status.observedGeneration == nil or conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile the provider"
  return hs
end

if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
  return hs
end

-- The first of these conditions that is True decides.
local verdicts = {
  { type = "Stalled", status = "Degraded" },
  { type = "Paused", status = "Suspended" },
  { type = "Ready", status = "Healthy" },
  { type = "Reconciling", status = "Progressing" },
}
for _, v in ipairs(verdicts) do
  local c = find(conditions, v.type)
  if c ~= nil and c.status == "True" then
    hs.status = v.status
    hs.message = describe(c, v.type)
    return hs
  end
end

hs.status = "Progressing"
hs.message = describe(find(conditions, "Ready"), "Waiting for the provider to become Ready")
return hs
